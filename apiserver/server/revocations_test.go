package server_test

import (
	"context"
	"testing"
	"time"

	"gpucloud/api"
)

// TestRevocationsLongPoll: a GPU server's revocations long-poll answers at once when its set
// differs from the version it knows, and otherwise returns within a second of one of its
// instances being deleted, naming it; with the credentials listener running the NOTIFY wakes it,
// without it the poll fallback does. A host's credential and a bad wait are refused.
func TestRevocationsLongPoll(t *testing.T) {
	for _, listen := range []bool{true, false} {
		e := newEnv(t)
		if listen {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go e.st.ListenCredentials(ctx, nil)
			for deadline := time.Now().Add(10 * time.Second); e.st.ListenerPID() == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("listener not connected")
				}
			}
		}
		hostKey := e.host("h1", 32, 65536)
		gsKey, _ := e.gpuServer("g1", 1)
		status, inst, body := e.create(e.tenantA.Key, "vm", e.shrType)
		if status != 201 {
			t.Fatalf("create: %d %s", status, body)
		}
		var first api.Revocations
		e.must(200, "GET", "/v1/agent/gpu-server/revocations?wait=20s", gsKey, nil, &first) // knows nothing: at once
		if len(first.Instances) != 0 || first.Version == "" {
			t.Fatalf("revocations of a GPU server with only a live instance: %+v", first)
		}
		type answer struct {
			set  api.Revocations
			code int
			at   time.Time
		}
		got := make(chan answer, 1)
		go func() {
			var a answer
			a.code, _, _ = e.call("GET", "/v1/agent/gpu-server/revocations?wait=20s&known="+first.Version, gsKey, nil, &a.set)
			a.at = time.Now()
			got <- a
		}()
		time.Sleep(300 * time.Millisecond) // the poll is waiting
		select {
		case a := <-got:
			t.Fatalf("the long-poll returned with nothing changed: %+v", a)
		default:
		}
		e.must(202, "DELETE", "/v1/instances/"+inst.ID.String(), e.tenantA.Key, nil, nil)
		deleted := time.Now()
		a := <-got
		if a.code != 200 || len(a.set.Instances) != 1 || a.set.Instances[0].InstanceID != inst.ID.String() || a.set.Version == first.Version {
			t.Fatalf("long-poll after the delete: %d %+v", a.code, a.set)
		}
		if took := a.at.Sub(deleted); took > time.Second {
			t.Fatalf("the revocation took %v to reach the long-poll (listener %v)", took, listen)
		}
		e.must(403, "GET", "/v1/agent/gpu-server/revocations", hostKey, nil, nil)
		e.must(400, "GET", "/v1/agent/gpu-server/revocations?wait=1h", gsKey, nil, nil)
		e.must(400, "GET", "/v1/agent/gpu-server/revocations?wait=soon", gsKey, nil, nil)
	}
}

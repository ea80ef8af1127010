package server_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/sessiontoken"
)

func TestHeartbeatRegistersAndSilenceMakesUnreachable(t *testing.T) {
	e := newEnv(t, envOpts{opts: server.Options{UnreachableAfter: 300 * time.Millisecond}})
	e.host("h1", 32, 65536)
	gpuKey, ack := e.gpuServer("g1", 2)
	pub, err := base64.StdEncoding.DecodeString(ack.TokenPublicKey)
	if err != nil || string(pub) != string(e.pub) {
		t.Fatalf("ack carries public key %q, want the signing key's", ack.TokenPublicKey)
	}
	var hosts server.Page[store.Host]
	e.must(200, "GET", "/v1/hosts", e.operator, nil, &hosts)
	if len(hosts.Items) != 1 || hosts.Items[0].Status != "ready" || hosts.Items[0].VCPUs != 32 || hosts.Items[0].MemoryMiB != 65536 {
		t.Fatalf("hosts %+v", hosts.Items)
	}
	var gs server.Page[store.GPUServer]
	e.must(200, "GET", "/v1/gpu-servers", e.operator, nil, &gs)
	if len(gs.Items) != 1 || len(gs.Items[0].GPUs) != 2 || gs.Items[0].GPUs[0].GPUModelID == nil || gs.Items[0].GPUs[0].GPUModelID.String() != e.modelID {
		t.Fatalf("gpu servers %+v", gs.Items)
	}
	// A GPU server credential cannot heartbeat as a host, and bad reports change nothing.
	e.must(403, "POST", "/v1/agent/host/heartbeat", gpuKey, api.HostReport{Hostname: "x"}, nil)
	e.must(400, "POST", "/v1/agent/gpu-server/heartbeat", gpuKey, api.GPUServerReport{Hostname: "g1", Endpoint: "nope"}, nil)
	e.must(400, "POST", "/v1/agent/gpu-server/heartbeat", gpuKey, []byte(`{"hostname": "g1", "endpoint": "g1:1", "gpus": [{"uuid": "a", "name": "x", "memory_bytes": -1}]}`), nil)

	// Silence: the sweeper marks both unreachable, and placement stops using them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.srv.RunSweeper(ctx, 100*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.must(200, "GET", "/v1/hosts", e.operator, nil, &hosts)
		e.must(200, "GET", "/v1/gpu-servers", e.operator, nil, &gs)
		if hosts.Items[0].Status == "unreachable" && gs.Items[0].Status == "unreachable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s/%s after silence", hosts.Items[0].Status, gs.Items[0].Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, _, b := e.create(e.tenantA.Key, "vm", e.cpuType); s != 503 {
		t.Fatalf("create on an unreachable host: %d %s", s, b)
	}
}

func TestLifecycleDrivenByHostReports(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	otherHost := e.host("h2", 32, 65536)
	e.gpuServer("g1", 1)
	e.must(200, "POST", "/v1/hosts/"+hostID(t, e, otherHost)+"/cordon", e.operator, nil, nil)
	status, inst, body := e.create(e.tenantA.Key, "vm", e.shrType)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	id := inst.ID.String()

	// The host sees the instance with its GPU grant and a token gpuserverd will accept.
	var want api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &want)
	if len(want.Instances) != 1 || want.Instances[0].ID != id || want.Instances[0].GPU == nil || want.Instances[0].DesiredState != "running" {
		t.Fatalf("desired %+v", want)
	}
	d := want.Instances[0]
	claims, err := sessiontoken.Verify(e.pub, d.Token.Token, d.GPU.GPUServerID, time.Now())
	if err != nil || claims.InstanceID != id || claims.Tier != "shared" || claims.MemoryQuota != uint64(10*gib) || len(claims.GPUs) != 1 ||
		claims.GPUs[0] != d.GPU.GPUUUIDs[0] || d.GPU.Endpoints[0] != "g1:7000" || d.PartitionKey == 0 {
		t.Fatalf("token claims %+v (%v), grant %+v", claims, err, d.GPU)
	}
	var renewed api.SessionToken
	e.must(200, "POST", "/v1/agent/host/instances/"+id+"/token", hostKey, nil, &renewed)
	if _, err := sessiontoken.Verify(e.pub, renewed.Token, d.GPU.GPUServerID, time.Now()); err != nil {
		t.Fatalf("renewed token: %v", err)
	}
	// Another host neither sees nor reports it.
	e.must(404, "PUT", "/v1/agent/host/instances/"+id+"/status", otherHost, api.InstanceObserved{State: "running"}, nil)
	e.must(404, "POST", "/v1/agent/host/instances/"+id+"/token", otherHost, nil, nil)
	e.must(400, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "exploded"}, nil)

	report := func(state string) {
		t.Helper()
		e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: state}, nil)
	}
	stateIs := func(want string) {
		t.Helper()
		var got store.Instance
		e.must(200, "GET", "/v1/instances/"+id, e.tenantA.Key, nil, &got)
		if got.State != want {
			t.Fatalf("state %s, want %s", got.State, want)
		}
	}
	report("provisioning")
	stateIs("provisioning")
	report("running")
	stateIs("running")
	var rebooted store.Instance
	e.must(200, "POST", "/v1/instances/"+id+"/reboot", e.tenantA.Key, nil, &rebooted)
	if rebooted.RebootGeneration != 1 {
		t.Fatalf("reboot generation %d", rebooted.RebootGeneration)
	}
	e.must(200, "POST", "/v1/instances/"+id+"/stop", e.tenantA.Key, nil, nil)
	stateIs("stopping")
	report("running") // stale: sent before the host saw the stop
	stateIs("stopping")
	report("stopped")
	stateIs("stopped")
	e.must(409, "POST", "/v1/instances/"+id+"/reboot", e.tenantA.Key, nil, nil)
	e.must(200, "POST", "/v1/instances/"+id+"/start", e.tenantA.Key, nil, nil)
	stateIs("pending")
	report("running")
	// A failure report records the reason.
	e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "failed", Reason: "qemu crashed"}, nil)
	var failed store.Instance
	e.must(200, "GET", "/v1/instances/"+id, e.tenantA.Key, nil, &failed)
	if failed.State != "failed" || failed.FailureReason != "qemu crashed" {
		t.Fatalf("failed instance %+v", failed)
	}
	// Deleting: the host may not report deleted before it was asked to.
	e.must(409, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "deleted"}, nil)
	e.must(202, "DELETE", "/v1/instances/"+id, e.tenantA.Key, nil, nil)
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &want)
	if len(want.Instances) != 1 || want.Instances[0].DesiredState != "deleted" {
		t.Fatalf("desired after delete %+v", want)
	}
	report("deleted")
	stateIs("deleted")
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &want)
	if len(want.Instances) != 0 {
		t.Fatalf("deleted instance still desired: %+v", want)
	}
	// Everything was released: GPU memory, host room, quota.
	var gpuReserved int64
	var usedVCPUs, usedInstances, reservations int
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT (SELECT sum(reserved_bytes) FROM gpus), (SELECT sum(used_vcpus) FROM hosts),
		(SELECT used_instances FROM tenants WHERE id = $1), (SELECT count(*) FROM gpu_reservations)`, e.tenantA.ID).
		Scan(&gpuReserved, &usedVCPUs, &usedInstances, &reservations); err != nil {
		t.Fatal(err)
	}
	if gpuReserved != 0 || usedVCPUs != 0 || usedInstances != 0 || reservations != 0 {
		t.Fatalf("after delete: %d GPU bytes, %d vCPUs, %d instances, %d reservations still held", gpuReserved, usedVCPUs, usedInstances, reservations)
	}
	// Every transition was recorded with its time, in order.
	var events server.Page[store.Event]
	e.must(200, "GET", "/v1/instances/"+id+"/events", e.tenantA.Key, nil, &events)
	var path []string
	for _, ev := range events.Items {
		path = append(path, ev.To)
		if ev.At.IsZero() {
			t.Fatalf("event without time: %+v", ev)
		}
	}
	wantPath := "pending provisioning running running stopping stopped pending running failed deleting deleted"
	if got := join(path); got != wantPath {
		t.Fatalf("transitions\n got %s\nwant %s", got, wantPath)
	}
	// The host can now be deleted; a host with instances could not.
	e.must(204, "DELETE", "/v1/hosts/"+hostID(t, e, hostKey), e.operator, nil, nil)
	e.must(401, "GET", "/v1/agent/host/instances", hostKey, nil, nil)
}

func TestDeleteBusyHostRefused(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	if s, _, b := e.create(e.tenantA.Key, "vm", e.cpuType); s != 201 {
		t.Fatal(s, string(b))
	}
	e.must(409, "DELETE", "/v1/hosts/"+hostID(t, e, hostKey), e.operator, nil, nil)
	e.must(200, "POST", "/v1/hosts/"+hostID(t, e, hostKey)+"/drain", e.operator, nil, nil)
	if s, _, _ := e.create(e.tenantA.Key, "vm2", e.cpuType); s != 503 {
		t.Fatalf("create on a drained host: %d", s)
	}
}

func hostID(t *testing.T, e *env, key string) string {
	var ack api.HostAck
	e.must(200, "POST", "/v1/agent/host/heartbeat", key, api.HostReport{Hostname: "h", Capacity: api.HostCapacity{VCPUs: 32, MemoryMiB: 65536, DiskGiB: 10000}}, &ack)
	return ack.HostID
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

// A host and GPU server go silent: the sweeper marks them unreachable and their instances carry
// HostReachable=False and GPUServerReachable=False with the time, while instances elsewhere stay
// True. Tenants see no host identity, the condition filter selects the affected instances within
// each tenant's scope, and a resumed heartbeat clears the conditions.
func TestInstanceConditionsFollowSilentDaemons(t *testing.T) {
	const silence = 1500 * time.Millisecond
	e := newEnv(t, envOpts{opts: server.Options{UnreachableAfter: silence}})
	registered := time.Now() // h1's and g1's last heartbeats come after this
	h1Key := e.host("h1", 100, 1<<20)
	g1Key, _ := e.gpuServer("g1", 1)
	created := func(key, name, typ string) store.Instance {
		t.Helper()
		s, inst, b := e.create(key, name, typ)
		if s != 201 {
			t.Fatalf("create %s: %d %s", name, s, b)
		}
		if len(inst.Conditions) == 0 || slices.ContainsFunc(inst.Conditions, func(c store.Condition) bool { return c.Status != "True" }) {
			t.Fatalf("create %s answers conditions %+v, want all True", name, inst.Conditions)
		}
		return inst
	}
	a1 := created(e.tenantA.Key, "a1", e.dedType) // h1, g1 (its only GPU)
	h2Key := e.host("h2", 100, 1<<20)
	g2Key, _ := e.gpuServer("g2", 2)
	e.must(200, "POST", "/v1/hosts/"+a1.HostID.String()+"/cordon", e.operator, nil, nil)
	a2 := created(e.tenantA.Key, "a2", e.dedType) // h2, g2
	b1 := created(e.tenantB.Key, "b1", e.dedType) // h2, g2
	a3 := created(e.tenantA.Key, "a3", e.cpuType) // h2, no GPU server
	if a2.HostID == a1.HostID || b1.HostID != a2.HostID || *a2.GPUServerID == *a1.GPUServerID || a3.GPUServerID != nil {
		t.Fatalf("placement not as arranged: a1 %s/%s a2 %s/%s b1 %s a3 %v", a1.HostID, a1.GPUServerID, a2.HostID, a2.GPUServerID, b1.HostID, a3.GPUServerID)
	}

	// h2 and g2 keep heartbeating; h1 and g1 fall silent while the sweeper runs.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Add(2)
	go func() { defer wg.Done(); e.srv.RunSweeper(ctx, 100*time.Millisecond) }()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			e.call("POST", "/v1/agent/host/heartbeat", h2Key, hostReport("h2", 100, 1<<20), nil)
			e.call("POST", "/v1/agent/gpu-server/heartbeat", g2Key, gpuServerReport("g2", 2), nil)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	cond := func(i store.Instance, typ string) *store.Condition {
		for n := range i.Conditions {
			if i.Conditions[n].Type == typ {
				return &i.Conditions[n]
			}
		}
		return nil
	}
	var got store.Instance
	for deadline := time.Now().Add(15 * time.Second); ; {
		e.must(200, "GET", "/v1/instances/"+a1.ID.String(), e.tenantA.Key, nil, &got)
		if h, g := cond(got, "HostReachable"), cond(got, "GPUServerReachable"); h != nil && g != nil && h.Status == "False" && g.Status == "False" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a1 conditions %+v after silence", got.Conditions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sweptBy := time.Now()
	if got.State != a1.State {
		t.Errorf("state moved %s -> %s: conditions must not change the state machine", a1.State, got.State)
	}
	for _, c := range got.Conditions {
		// The sweeper marks a daemon once it has been silent for longer than silence (100 ms of
		// slack for rounding between the database's clock and ours).
		earliest := registered.Add(silence - 100*time.Millisecond)
		if c.Since == nil || c.Since.Before(earliest) || c.Since.After(sweptBy) || c.Message == "" {
			t.Errorf("a1 %s: since %v message %q, want a time in [%v, %v] and a message", c.Type, c.Since, c.Message, earliest, sweptBy)
		}
	}

	// The tenant's view names neither daemon; the operator gets the same conditions.
	_, _, raw := e.call("GET", "/v1/instances/"+a1.ID.String(), e.tenantA.Key, nil, nil)
	_, _, list := e.call("GET", "/v1/instances?condition=HostReachable=False", e.tenantA.Key, nil, nil)
	for _, body := range []string{string(raw), string(list)} {
		if strings.Contains(body, "h1") || strings.Contains(body, "g1") || !strings.Contains(body, `"HostReachable"`) {
			t.Errorf("tenant view leaks a daemon's identity or lacks the condition: %s", body)
		}
	}
	var op store.Instance
	e.must(200, "GET", "/v1/instances/"+a1.ID.String(), e.operator, nil, &op)
	if opJSON, _ := json.Marshal(op.Conditions); string(opJSON) != mustJSON(t, got.Conditions) {
		t.Errorf("operator sees %s, tenant %s", opJSON, mustJSON(t, got.Conditions))
	}

	// Instances on the live host and GPU server, of either tenant, are unaffected.
	for _, c := range []struct {
		key string
		id  string
	}{{e.tenantA.Key, a2.ID.String()}, {e.tenantB.Key, b1.ID.String()}, {e.tenantA.Key, a3.ID.String()}} {
		var i store.Instance
		e.must(200, "GET", "/v1/instances/"+c.id, c.key, nil, &i)
		want := 2
		if i.GPUServerID == nil {
			want = 1
		}
		if len(i.Conditions) != want || slices.ContainsFunc(i.Conditions, func(c store.Condition) bool { return c.Status != "True" || c.Since != nil }) {
			t.Errorf("%s: conditions %+v, want %d all True", i.Name, i.Conditions, want)
		}
	}

	for _, c := range []struct {
		who, key, query string
		want            []string
	}{
		{"tenant A", e.tenantA.Key, "condition=HostReachable=False", []string{"a1"}},
		{"tenant A", e.tenantA.Key, "condition=HostReachable=True", []string{"a2", "a3"}},
		{"tenant A", e.tenantA.Key, "condition=GPUServerReachable=True", []string{"a2"}},
		{"tenant A", e.tenantA.Key, "condition=GPUServerReachable=False,HostReachable=False", []string{"a1"}},
		{"tenant A", e.tenantA.Key, "condition=GPUServerReachable=True&condition=HostReachable=False", nil},
		{"tenant B", e.tenantB.Key, "condition=HostReachable=False", nil},
		{"tenant B", e.tenantB.Key, "condition=HostReachable=True", []string{"b1"}},
		{"operator", e.operator, "condition=HostReachable=False", []string{"a1"}},
		{"operator", e.operator, "condition=GPUServerReachable=True", []string{"a2", "b1"}},
		{"operator", e.operator, "condition=HostReachable=True&state=pending", []string{"a2", "a3", "b1"}},
	} {
		if got := e.names(c.key, c.query); !slices.Equal(got, c.want) {
			t.Errorf("%s ?%s: %v, want %v", c.who, c.query, got, c.want)
		}
	}
	var silentPage server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances?condition=HostReachable=False", e.operator, nil, &silentPage)
	if len(silentPage.Items) != 1 || mustJSON(t, silentPage.Items[0].Conditions) != mustJSON(t, got.Conditions) {
		t.Errorf("operator's filtered list: %+v, want a1 with %+v", silentPage.Items, got.Conditions)
	}
	for _, q := range []string{"condition=HostReachable", "condition=Bogus=False", "condition=HostReachable=false",
		"condition=HostReachable=False,", "condition="} {
		s, _, b := e.call("GET", "/v1/instances?"+q, e.tenantA.Key, nil, nil)
		if s != 400 || !strings.Contains(string(b), `"condition"`) {
			t.Errorf("?%s: %d %s", q, s, b)
		}
	}

	// Heartbeats resume (with the sweeper stopped, so it cannot race them): conditions clear.
	cancel()
	wg.Wait()
	e.must(200, "POST", "/v1/agent/host/heartbeat", h1Key, hostReport("h1", 100, 1<<20), nil)
	e.must(200, "POST", "/v1/agent/gpu-server/heartbeat", g1Key, gpuServerReport("g1", 1), nil)
	got = store.Instance{} // decoding into the old value would keep its since and message
	e.must(200, "GET", "/v1/instances/"+a1.ID.String(), e.tenantA.Key, nil, &got)
	if len(got.Conditions) != 2 || slices.ContainsFunc(got.Conditions, func(c store.Condition) bool { return c.Status != "True" || c.Since != nil || c.Message != "" }) {
		t.Errorf("after heartbeats resumed: %+v", got.Conditions)
	}
	if n := e.names(e.operator, "condition=HostReachable=False"); n != nil {
		t.Errorf("after heartbeats resumed, HostReachable=False lists %v", n)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

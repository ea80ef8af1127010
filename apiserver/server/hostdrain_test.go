package server_test

import (
	"strings"
	"testing"
)

// A host drain's body is checked field by field before anything changes: a bad mode, fallback
// without live, a mode without move and unknown fields are 400s naming the field, the host stays
// schedulable; tenants may not drain; a move report of an unknown move is 404.
func TestHostDrainBadInput(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 8, 16384)
	id := hostID(t, e, hostKey)
	for body, field := range map[string]string{
		`{"move": true, "mode": "teleport"}`:   "mode",
		`{"move": true, "fallback": true}`:     "fallback",
		`{"mode": "live"}`:                     "move",
		`{"move": true, "speed": "ludicrous"}`: "speed",
		`{"move": "yes"}`:                      "move",
	} {
		status, _, out := e.call("POST", "/v1/hosts/"+id+"/drain", e.operator, []byte(body), nil)
		if status != 400 || !strings.Contains(string(out), field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, status, out, field)
		}
	}
	var h struct{ Cordoned, Draining bool }
	e.must(200, "GET", "/v1/hosts/"+id, e.operator, nil, &h)
	if h.Cordoned || h.Draining {
		t.Fatalf("refused drains changed the host: %+v", h)
	}
	if status, _, _ := e.call("POST", "/v1/hosts/"+id+"/drain", e.tenantA.Key, map[string]bool{"move": true}, nil); status != 403 {
		t.Fatalf("a tenant drained a host: %d", status)
	}
	if status, _, out := e.call("PUT", "/v1/agent/host/moves/0190c0de-0000-7000-8000-000000000000", hostKey,
		map[string]string{"state": "done"}, nil); status != 404 {
		t.Fatalf("report on an unknown move: %d %s", status, out)
	}
	if status, _, out := e.call("PUT", "/v1/agent/host/moves/0190c0de-0000-7000-8000-000000000000", hostKey,
		map[string]any{"state": "done", "bytes_copied": -5}, nil); status != 400 || !strings.Contains(string(out), "bytes_copied") {
		t.Fatalf("report with negative bytes: %d %s", status, out)
	}
}

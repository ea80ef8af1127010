package server_test

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

// The instance list's filters: state, host, GPU server, deleted instances hidden by default;
// each filter combines with tenant scoping and pagination.
func TestInstanceListFilters(t *testing.T) {
	e := newEnv(t)
	h1Key := e.host("h1", 100, 1<<20)
	e.gpuServer("g1", 1)
	created := func(key, name, typ string) store.Instance {
		t.Helper()
		s, inst, b := e.create(key, name, typ)
		if s != 201 {
			t.Fatalf("create %s: %d %s", name, s, b)
		}
		return inst
	}
	a1 := created(e.tenantA.Key, "a1", e.dedType) // h1, g1 (its only GPU)
	a2 := created(e.tenantA.Key, "a2", e.cpuType) // h1
	h1, g1 := a1.HostID.String(), a1.GPUServerID.String()
	e.host("h2", 100, 1<<20)
	e.gpuServer("g2", 2)
	e.must(200, "POST", "/v1/hosts/"+h1+"/cordon", e.operator, nil, nil)
	a3 := created(e.tenantA.Key, "a3", e.dedType) // h2, g2
	b1 := created(e.tenantB.Key, "b1", e.dedType) // h2, g2
	h2, g2 := a3.HostID.String(), a3.GPUServerID.String()
	if b1.HostID != a3.HostID || b1.GPUServerID == nil || b1.GPUServerID.String() != g2 || h1 == h2 || g1 == g2 {
		t.Fatalf("placement not as arranged: a1 %s/%s a3 %s/%s b1 %s/%v", h1, g1, h2, g2, b1.HostID, b1.GPUServerID)
	}
	// a2 goes through deleting to deleted, as its host reports.
	e.must(202, "DELETE", "/v1/instances/"+a2.ID.String(), e.tenantA.Key, nil, nil)
	e.must(204, "PUT", "/v1/agent/host/instances/"+a2.ID.String()+"/status", h1Key, api.InstanceObserved{State: "deleted"}, nil)

	for _, c := range []struct {
		who, key, query string
		want            []string
	}{
		{"tenant A", e.tenantA.Key, "", []string{"a1", "a3"}},
		{"tenant A", e.tenantA.Key, "include_deleted=true", []string{"a1", "a2", "a3"}},
		{"tenant A", e.tenantA.Key, "include_deleted=false", []string{"a1", "a3"}},
		{"tenant A", e.tenantA.Key, "state=deleted", []string{"a2"}},
		{"tenant A", e.tenantA.Key, "state=pending,deleted", []string{"a1", "a2", "a3"}},
		{"tenant A", e.tenantA.Key, "state=running&state=deleted", []string{"a2"}},
		{"tenant A", e.tenantA.Key, "state=running", nil},
		{"tenant A", e.tenantA.Key, "host_id=" + h2, []string{"a3"}}, // never B's b1
		{"tenant B", e.tenantB.Key, "host_id=" + h1 + "&include_deleted=true", nil},
		{"operator", e.operator, "", []string{"a1", "a3", "b1"}},
		{"operator", e.operator, "host_id=" + h2, []string{"a3", "b1"}},
		{"operator", e.operator, "host_id=" + h1, []string{"a1"}},
		{"operator", e.operator, "host_id=" + h1 + "&include_deleted=true", []string{"a1", "a2"}},
		{"operator", e.operator, "gpu_server_id=" + g1, []string{"a1"}},
		{"operator", e.operator, "gpu_server_id=" + g2 + "&state=pending", []string{"a3", "b1"}},
		{"operator", e.operator, "gpu_server_id=" + g2 + "&host_id=" + h1, nil},
	} {
		if got := e.names(c.key, c.query); !slices.Equal(got, c.want) {
			t.Errorf("%s ?%s: %v, want %v", c.who, c.query, got, c.want)
		}
	}

	// Pages of a filtered list.
	var p1, p2 server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances?limit=1&gpu_server_id="+g2, e.operator, nil, &p1)
	if len(p1.Items) != 1 || p1.NextCursor == "" {
		t.Fatalf("first page %+v", p1)
	}
	e.must(200, "GET", "/v1/instances?limit=1&gpu_server_id="+g2+"&cursor="+url.QueryEscape(p1.NextCursor), e.operator, nil, &p2)
	if len(p2.Items) != 1 || p2.Items[0].ID == p1.Items[0].ID || p2.Items[0].GPUServerID.String() != g2 {
		t.Fatalf("second page %+v after %+v", p2, p1)
	}

	// Bad filters are 400s naming the parameter.
	for query, field := range map[string]string{
		"state=bogus": "state", "state=running,": "state", "host_id=nope": "host_id",
		"gpu_server_id=1234": "gpu_server_id", "include_deleted=maybe": "include_deleted",
	} {
		s, _, b := e.call("GET", "/v1/instances?"+query, e.tenantA.Key, nil, nil)
		if s != 400 || !strings.Contains(string(b), `"`+field+`"`) {
			t.Errorf("?%s: %d %s", query, s, b)
		}
	}
}

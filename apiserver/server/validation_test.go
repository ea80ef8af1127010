package server_test

import (
	"context"
	"testing"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// TestValidationGaps covers the finding 10: each request is refused with a 400 naming
// the field (a 404 for a tenant that does not exist) and leaves state as it was.
func TestValidationGaps(t *testing.T) {
	e := newEnv(t, envOpts{billing: true})
	_, finance, err := app.Bootstrap(context.Background(), e.st, "fin@example.com", authn.RoleFinance)
	if err != nil {
		t.Fatal(err)
	}
	var me server.Me
	e.must(200, "GET", "/v1/me", e.tenantA.Key, nil, &me)
	quota := "/v1/tenants/" + e.tenantA.ID + "/quota"
	e.must(200, "PUT", quota, e.operator, map[string]int64{"instances": 7, "gpus": 5, "gpu_memory_bytes": 3 << 30}, nil)
	keys := "/v1/users/" + me.UserID.String() + "/api-keys"
	inst := func(name, image string) map[string]string {
		return map[string]string{"name": name, "instance_type_id": e.cpuType, "image": image}
	}
	for _, c := range []struct {
		what, method, path, key string
		body                    any
		field                   string
	}{
		// PUT replaces the quotas whole: every field is required.
		{"quota null", "PUT", quota, e.operator, []byte(`null`), "body"},
		{"quota {}", "PUT", quota, e.operator, []byte(`{}`), "instances"},
		{"quota one field", "PUT", quota, e.operator, []byte(`{"instances":9}`), "gpus"},
		{"quota null field", "PUT", quota, e.operator, []byte(`{"instances":9,"gpus":null,"gpu_memory_bytes":1}`), "gpus"},
		{"api key null", "POST", keys, e.tenantA.Key, []byte(`null`), "body"},
		{"api key ESC", "POST", keys, e.tenantA.Key, map[string]string{"name": "\x1b[2Jhi"}, "name"},
		{"api key CRLF", "POST", keys, e.tenantA.Key, map[string]string{"name": "a\r\nb"}, "name"},
		{"api key RLO", "POST", keys, e.tenantA.Key, map[string]string{"name": "key\u202Egnp.exe"}, "name"},
		{"api key LRI", "POST", keys, e.tenantA.Key, map[string]string{"name": "\u2066x"}, "name"},
		{"name -", "POST", "/v1/instances", e.tenantA.Key, inst("-", "demo"), "name"},
		{"name --", "POST", "/v1/instances", e.tenantA.Key, inst("--", "demo"), "name"},
		{"tenant --", "POST", "/v1/tenants", e.operator, map[string]string{"name": "--"}, "name"},
		{"host -", "POST", "/v1/hosts", e.operator, map[string]string{"name": "-"}, "name"},
		{"image path", "POST", "/v1/instances", e.tenantA.Key, inst("vm", "../../../../etc/passwd"), "image"},
		{"image upper", "POST", "/v1/instances", e.tenantA.Key, inst("vm", "DEMO"), "image"},
		{"image ESC", "POST", "/v1/instances", e.tenantA.Key, inst("vm", "demo\x1b"), "image"},
		{"gpu model CR", "POST", "/v1/gpu-models", e.operator, map[string]any{"name": "H\r200", "memory_bytes": 1, "nvml_match": "H200"}, "name"},
	} {
		status, _, raw := e.call(c.method, c.path, c.key, c.body, nil)
		if status != 400 {
			t.Errorf("%s: %d %s, want 400", c.what, status, raw)
			continue
		}
		fs, _ := problemOf(t, raw)["fields"].([]any)
		if len(fs) == 0 || fs[0].(map[string]any)["field"] != c.field {
			t.Errorf("%s: fields %v, want %s named", c.what, fs, c.field)
		}
	}
	// Nothing changed: the quotas are as set, no key and no instance was made.
	var ten store.Tenant
	e.must(200, "GET", "/v1/tenants/"+e.tenantA.ID, e.operator, nil, &ten)
	if ten.QuotaInstances != 7 || ten.QuotaGPUs != 5 || ten.QuotaGPUMemoryBytes != 3<<30 {
		t.Fatalf("quotas after refused PUTs: %+v", ten)
	}
	var ks server.Page[store.APIKey]
	e.must(200, "GET", keys, e.tenantA.Key, nil, &ks)
	if len(ks.Items) != 1 {
		t.Fatalf("%d keys, want only the admin's own", len(ks.Items))
	}
	if names := e.names(e.tenantA.Key, ""); len(names) != 0 {
		t.Fatalf("instances made: %v", names)
	}
	// Accepted: a key name with accents and emoji, a DNS-label instance name, a real image name.
	e.must(201, "POST", keys, e.tenantA.Key, map[string]string{"name": "clé ✓ laptop"}, nil)
	if status, _, raw := e.create(e.tenantA.Key, "vm-1", e.cpuType); status == 400 {
		t.Fatalf("a valid create refused: %s", raw)
	}

	// Closing a period of a tenant that does not exist is a 404, and makes no invoice.
	status, _, raw := e.call("POST", "/v1/periods/close", finance, map[string]string{"tenant_id": "01a20000-0000-7000-8000-0000000000ff", "period": "2026-01"}, nil)
	if status != 404 {
		t.Fatalf("close an unknown tenant's period: %d %s", status, raw)
	}
	var invs struct {
		Items []any `json:"items"`
	}
	e.must(200, "GET", "/v1/invoices", finance, nil, &invs)
	if len(invs.Items) != 0 {
		t.Fatalf("invoices: %v", invs.Items)
	}
}

package server_test

import (
	"context"
	"testing"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/internal/authn"
)

// TestNULAndBigNumbersAre400 sends, to every kind of route that takes a body (the apiserver's,
// the agents' and billing's), a NUL byte in a string, bytes that are not UTF-8, and numbers past
// their column's 32 or 63 bits. Each is a 400 naming the field, never a 500 from PostgreSQL.
func TestNULAndBigNumbersAre400(t *testing.T) {
	e := newEnv(t, envOpts{billing: true})
	hostKey := e.host("h1", 32, 65536)
	gpuKey, _ := e.gpuServer("g1", 1)
	_, finance, err := app.Bootstrap(context.Background(), e.st, "fin@example.com", authn.RoleFinance)
	if err != nil {
		t.Fatal(err)
	}
	var me server.Me
	e.must(200, "GET", "/v1/me", e.tenantA.Key, nil, &me)
	const nul, big, huge = `a\u0000b`, `4294967296`, `18446744073709551615`
	inst := `{"name":"vm","instance_type_id":"` + e.cpuType + `","image":"demo"`
	gpuRep := func(name, index, mem string) string {
		return `{"hostname":"g1","endpoint":"g1:7000","backend":"simulated","gpus":[{"index":` + index +
			`,"uuid":"GPU-g1-0","name":"` + name + `","memory_bytes":` + mem + `,"healthy":true}]}`
	}
	for _, c := range []struct {
		method, path, key, body, field string
	}{
		{"POST", "/v1/tenants", e.operator, `{"name":"` + nul + `"}`, "name"},
		{"POST", "/v1/tenants", e.operator, `{"name":"t","quota_instances":` + big + `}`, "quota_instances"},
		{"PUT", "/v1/tenants/" + e.tenantA.ID + "/quota", e.operator, `{"instances":` + big + `,"gpus":1,"gpu_memory_bytes":1}`, "instances"},
		{"POST", "/v1/users/" + me.UserID.String() + "/api-keys", e.tenantA.Key, `{"name":"` + nul + `"}`, "name"},
		{"POST", "/v1/users", e.tenantA.Key, `{"email":"` + nul + `@x.example","role":"tenant-member"}`, "email"},
		{"POST", "/v1/instances", e.tenantA.Key, inst + `,"ssh_key":"ssh-ed25519 ` + nul + `"}`, "ssh_key"},
		{"POST", "/v1/instances", e.tenantA.Key, `{"name":"vm","instance_type_id":"` + e.cpuType + `","image":"` + nul + `"}`, "image"},
		{"POST", "/v1/instances", e.tenantA.Key, "{\"name\":\"vm\xff\",\"instance_type_id\":\"" + e.cpuType + "\",\"image\":\"demo\"}", "name"},
		{"POST", "/v1/gpu-models", e.operator, `{"name":"` + nul + `","memory_bytes":1,"nvml_match":"x"}`, "name"},
		{"POST", "/v1/gpu-models", e.operator, `{"name":"m","memory_bytes":` + huge + `,"nvml_match":"x"}`, "memory_bytes"},
		{"POST", "/v1/instance-types", e.operator, `{"name":"t","vcpus":` + big + `,"memory_mib":1,"disk_gib":1,"tier":"dedicated","price_per_hour":1}`, "vcpus"},
		{"POST", "/v1/hosts", e.operator, `{"name":"` + nul + `"}`, "name"},
		{"POST", "/v1/agent/host/heartbeat", hostKey, `{"hostname":"` + nul + `","capacity":{"vcpus":1,"memory_mib":1,"disk_gib":1}}`, "hostname"},
		{"POST", "/v1/agent/host/heartbeat", hostKey, `{"hostname":"h1","capacity":{"vcpus":` + big + `,"memory_mib":1,"disk_gib":1}}`, "capacity.vcpus"},
		{"POST", "/v1/agent/gpu-server/heartbeat", gpuKey, gpuRep(nul, "0", "1"), "gpus[0].name"},
		{"POST", "/v1/agent/gpu-server/heartbeat", gpuKey, gpuRep("H100", big, "1"), "gpus[0].index"},
		{"POST", "/v1/agent/gpu-server/heartbeat", gpuKey, gpuRep("H100", "0", huge), "gpus[0].memory_bytes"},
		{"POST", "/v1/prices", finance, `{"kind":"vm","instance_type":"` + nul + `","unit_price_micros":1,"currency":"USD","effective_from":"2026-01-01T00:00:00Z"}`, "instance_type"},
		{"POST", "/v1/periods/close", finance, `{"tenant_id":"` + nul + `","period":"2026-01"}`, "tenant_id"},
		{"POST", "/v1/session", "", `{"email":"` + nul + `","password":"x"}`, "email"},
		{"GET", "/v1/instances?name=a%00b", e.tenantA.Key, "", "name"},
		{"GET", "/v1/invoices?tenant_id=%ff", finance, "", "tenant_id"},
	} {
		var body any
		if c.body != "" {
			body = []byte(c.body)
		}
		status, _, raw := e.call(c.method, c.path, c.key, body, nil)
		if status != 400 {
			t.Errorf("%s %s %.60s: %d %s, want 400", c.method, c.path, c.body, status, raw)
			continue
		}
		p := problemOf(t, raw)
		fs, _ := p["fields"].([]any)
		if len(fs) == 0 || fs[0].(map[string]any)["field"] != c.field {
			t.Errorf("%s %s %.60s: fields %v, want %s named", c.method, c.path, c.body, p["fields"], c.field)
		}
	}
}

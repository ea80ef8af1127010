package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func TestAccountCommands(t *testing.T) {
	h := newHarness(t)
	var ten sdk.Tenant
	h.jsonOf(&ten, "", "tenants", "create", "acme", "--quota-instances", "4", "--quota-gpus", "2")
	if ten.Name != "acme" || ten.QuotaInstances != 4 || ten.QuotaGPUs != 2 {
		t.Fatalf("created %+v", ten)
	}
	var list []sdk.Tenant
	h.jsonOf(&list, "", "tenants", "list")
	if len(list) != 3 {
		t.Fatalf("tenants %+v", list)
	}
	if out := h.ok("", "tenants", "list"); !strings.Contains(out, "acme") || !strings.Contains(out, "GPU MEMORY") {
		t.Fatalf("table:\n%s", out)
	}
	h.jsonOf(&ten, "", "quota", "set", ten.ID, "--instances", "9", "--gpus", "3", "--gpu-memory-bytes", "1000")
	if ten.QuotaInstances != 9 || ten.QuotaGPUMemoryBytes != 1000 {
		t.Fatalf("quota set %+v", ten)
	}
	// Quotas as YAML, with the API's field names.
	var q map[string]any
	if err := yaml.Unmarshal([]byte(h.ok("", "quota", "get", ten.ID, "-o", "yaml")), &q); err != nil || q["quota_gpus"] != 3 {
		t.Fatalf("quota get yaml: %v %v", q, err)
	}
	h.code(cli.ExitInvalid, "", "quota", "set", ten.ID, "--instances", "-1", "--gpus", "0", "--gpu-memory-bytes", "0")
	h.code(cli.ExitAuth, h.e.A.AdminKey, "quota", "set", h.e.A.ID, "--instances", "99", "--gpus", "0", "--gpu-memory-bytes", "0")
	// A tenant admin sees its own quota, not another's.
	h.ok(h.e.A.AdminKey, "quota", "get", h.e.A.ID)
	h.code(cli.ExitNotFound, h.e.A.AdminKey, "quota", "get", h.e.B.ID)

	var u sdk.User
	h.jsonOf(&u, h.e.A.AdminKey, "users", "create", "dev@a.example", "--tenant", h.e.A.ID)
	if u.Role != sdk.RoleTenantMember || u.TenantID != h.e.A.ID {
		t.Fatalf("user %+v", u)
	}
	h.code(cli.ExitInvalid, h.e.A.AdminKey, "users", "create", "not-an-email", "--tenant", h.e.A.ID)
	h.code(cli.ExitAuth, h.e.A.AdminKey, "users", "create", "op2@example.com", "--role", "operator")
	var users []sdk.User
	h.jsonOf(&users, h.e.B.AdminKey, "users", "list")
	if len(users) != 1 || users[0].TenantID != h.e.B.ID {
		t.Fatalf("tenant B sees users %+v", users)
	}
	h.jsonOf(&users, "", "users", "list", "--tenant", h.e.A.ID)
	if len(users) != 2 {
		t.Fatalf("operator lists tenant A: %+v", users)
	}
	h.jsonOf(&u, h.e.A.AdminKey, "users", "get", u.ID)
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "users", "get", u.ID)

	var k sdk.NewAPIKey
	h.jsonOf(&k, h.e.A.AdminKey, "keys", "create", u.ID, "--name", "ci")
	if k.Secret == "" {
		t.Fatalf("key %+v", k)
	}
	if out := h.ok(h.e.A.AdminKey, "keys", "create", u.ID); !strings.Contains(out, "SHOWN ONCE") {
		t.Fatalf("key table:\n%s", out)
	}
	var me sdk.Me
	h.jsonOf(&me, k.Secret, "whoami")
	if me.UserID != u.ID {
		t.Fatalf("new key is %+v", me)
	}
	var keys []sdk.APIKey
	h.jsonOf(&keys, h.e.A.AdminKey, "keys", "list", u.ID)
	if len(keys) != 2 {
		t.Fatalf("keys %+v", keys)
	}
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "keys", "revoke", k.ID)
	h.ok(h.e.A.AdminKey, "keys", "revoke", k.ID)
	h.code(cli.ExitAuth, k.Secret, "whoami")

	var audit []sdk.AuditEntry
	h.jsonOf(&audit, "", "audit", "--last", "3")
	if len(audit) != 3 || audit[2].Action == "" {
		t.Fatalf("audit %+v", audit)
	}
	h.code(cli.ExitAuth, k.Secret, "audit")
}

func TestCatalogCommands(t *testing.T) {
	h := newHarness(t)
	var m sdk.GPUModel
	h.jsonOf(&m, "", "gpu-models", "create", "A100", "--memory-bytes", "85899345920", "--nvml-match", "A100")
	var models []sdk.GPUModel
	h.jsonOf(&models, h.e.A.AdminKey, "gpu-models", "list")
	if len(models) != 2 {
		t.Fatalf("models %+v", models)
	}
	h.jsonOf(&m, h.e.A.AdminKey, "gpu-models", "get", m.ID)
	if m.Name != "A100" {
		t.Fatalf("model %+v", m)
	}
	h.code(cli.ExitAuth, h.e.A.AdminKey, "gpu-models", "create", "X", "--memory-bytes", "1", "--nvml-match", "X")
	h.code(cli.ExitInvalid, "", "gpu-models", "create", "Y", "--memory-bytes", "0", "--nvml-match", "Y")

	var it sdk.InstanceType
	h.jsonOf(&it, "", "instance-types", "create", "a100-x2", "--vcpus", "16", "--memory-mib", "65536", "--disk-gib", "200",
		"--gpu-model", m.ID, "--gpus", "2", "--price-per-hour", "450", "--currency", "EUR")
	if it.GPUCount != 2 || it.Currency != "EUR" {
		t.Fatalf("type %+v", it)
	}
	h.code(cli.ExitInvalid, "", "instance-types", "create", "bad", "--vcpus", "1", "--memory-mib", "1", "--disk-gib", "1", "--gpus", "1")
	out := h.ok(h.e.B.AdminKey, "instance-types", "list")
	if !strings.Contains(out, "a100-x2") || !strings.Contains(out, "4.50 EUR") || !strings.Contains(out, "2.50 USD") {
		t.Fatalf("instance types with their prices:\n%s", out)
	}
	var types []sdk.InstanceType
	h.jsonOf(&types, h.e.B.AdminKey, "instance-types", "list")
	if len(types) != 4 {
		t.Fatalf("types %+v", types)
	}
	h.jsonOf(&it, h.e.B.AdminKey, "instance-types", "get", it.ID)
	h.code(cli.ExitNotFound, "", "instance-types", "get", "00000000-0000-0000-0000-000000000001")

	var tier sdk.Tier
	h.jsonOf(&tier, "", "tiers", "set-shared", "--memory-slice-bytes", "21474836480")
	if tier.MemorySliceBytes == nil || *tier.MemorySliceBytes != 20<<30 {
		t.Fatalf("tier %+v", tier)
	}
	if out := h.ok(h.e.A.AdminKey, "tiers", "list"); !strings.Contains(out, "20.0GiB") || !strings.Contains(out, "whole GPU") {
		t.Fatalf("tiers:\n%s", out)
	}
	h.code(cli.ExitInvalid, "", "tiers", "set-shared", "--memory-slice-bytes", "0")
}

func TestInstanceCommands(t *testing.T) {
	h := newHarness(t)
	_, hc := h.e.Host(t, "h1", 32)
	gsID, _ := h.e.GPUServer(t, "g1", 2)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go sdktest.PlayHost(ctx, t, hc)
	a := h.e.A.AdminKey

	var inst sdk.Instance
	h.jsonOf(&inst, a, "instances", "create", "vm1", "--type", h.e.Shared, "--image", "ubuntu-24.04", "--wait", "--poll-interval", "20ms")
	if inst.State != sdk.StateRunning || inst.GPUServerID != gsID {
		t.Fatalf("create --wait: %+v", inst)
	}
	r := h.as(a, "instances", "stop", inst.ID, "--wait", "--poll-interval", "20ms")
	if r.code != 0 || !strings.Contains(r.out, "stopped") || !strings.Contains(r.err, "-> stopped") {
		t.Fatalf("stop --wait: %+v", r)
	}
	h.code(cli.ExitInvalid, a, "instances", "reboot", inst.ID) // stopped: conflict
	h.jsonOf(&inst, a, "instances", "start", inst.ID, "--wait=running", "--poll-interval", "20ms")
	if inst.State != sdk.StateRunning {
		t.Fatalf("start --wait=running: %+v", inst)
	}
	h.jsonOf(&inst, a, "instances", "reboot", inst.ID)
	if inst.RebootGeneration != 1 {
		t.Fatalf("reboot %+v", inst)
	}
	var list []sdk.Instance
	h.jsonOf(&list, a, "instances", "list")
	if len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("list %+v", list)
	}
	// Tenant B neither sees nor touches it; the operator sees it.
	h.jsonOf(&list, h.e.B.AdminKey, "instances", "list")
	if len(list) != 0 {
		t.Fatalf("B lists %+v", list)
	}
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "instances", "get", inst.ID)
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "instances", "delete", inst.ID)
	h.jsonOf(&list, "", "instances", "list")
	if len(list) != 1 {
		t.Fatalf("operator lists %+v", list)
	}
	// Sessions on the GPU server: the instance holds one.
	h.jsonOf(&list, "", "gpu-servers", "sessions", gsID)
	if len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("sessions %+v", list)
	}
	h.code(cli.ExitInvalid, a, "instances", "create", "vm2", "--type", h.e.CPU, "--image", "two words")
	h.code(cli.ExitUsage, a, "instances", "create", "vm2", "--type", h.e.CPU) // --image required
	h.code(cli.ExitAuth, "", "instances", "create", "vm3", "--type", h.e.CPU, "--image", "u")

	h.jsonOf(&inst, a, "instances", "delete", inst.ID, "--wait", "--poll-interval", "20ms")
	if inst.State != sdk.StateDeleted {
		t.Fatalf("delete --wait: %+v", inst)
	}
	var evs []sdk.Event
	h.jsonOf(&evs, a, "instances", "events", inst.ID)
	if len(evs) < 6 || evs[len(evs)-1].To != sdk.StateDeleted {
		t.Fatalf("events %+v", evs)
	}
	h.jsonOf(&list, a, "instances", "list")
	if len(list) != 0 {
		t.Fatalf("deleted still listed: %+v", list)
	}
	h.jsonOf(&list, a, "instances", "list", "--all")
	if len(list) != 1 {
		t.Fatalf("--all: %+v", list)
	}
	h.jsonOf(&list, a, "instances", "list", "--state", "deleted", "--host", inst.HostID)
	if len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("--state deleted --host: %+v", list)
	}
	h.jsonOf(&list, a, "instances", "list", "--all", "--state", "running,pending")
	if len(list) != 0 {
		t.Fatalf("--state running,pending: %+v", list)
	}
	h.code(cli.ExitInvalid, a, "instances", "list", "--state", "gone")

	// A wait that cannot end times out with its own exit code: nothing plays this host.
	stop()
	var created sdk.Instance
	h.jsonOf(&created, a, "instances", "create", "vm4", "--type", h.e.CPU, "--image", "u")
	h.code(cli.ExitTimeout, a, "instances", "stop", created.ID, "--wait", "--timeout", "200ms", "--poll-interval", "20ms")
}

func TestReportCommand(t *testing.T) {
	h := newHarness(t)
	h.code(cli.ExitUsage, h.e.Finance, "report", "gpu-hours", "--from", "last tuesday")
	h.code(cli.ExitUsage, h.e.Finance, "report", "gpu-hours", "--format", "xml")

	// Usage as a GPU server would send it: 90 GPU-minutes for tenant A in March 2026.
	m := h.e.Meter(t, "gs-report")
	start := time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)
	m.GPU(t, h.e.A.ID, "H100", "dedicated", start, time.Hour)
	m.GPU(t, h.e.A.ID, "H100", "dedicated", start, 30*time.Minute)

	var rep sdk.GPUHoursReport
	h.jsonOf(&rep, h.e.Finance, "report", "gpu-hours", "--from", "2026-03-01", "--to", "2026-04-01", "--group-by", "tenant", "-o", "json")
	if rep.Total.GPUMs != int64(90*time.Minute/time.Millisecond) || rep.Total.Records != 2 {
		t.Fatalf("report total %+v, want 90 GPU-minutes over 2 records", rep.Total)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Group != h.e.A.ID {
		t.Fatalf("report rows %+v, want one row for tenant A", rep.Rows)
	}
	csv := h.ok(h.e.Finance, "report", "gpu-hours", "--from", "2026-03-01", "--to", "2026-04-01", "--group-by", "tenant", "--format", "csv")
	if !strings.Contains(csv, h.e.A.ID) || !strings.Contains(csv, "1.5") {
		t.Fatalf("CSV lacks tenant A's 1.5 GPU-hours:\n%s", csv)
	}
	// CSV and -o json both choose the output: refused, not CSV printed silently.
	h.code(cli.ExitUsage, h.e.Finance, "report", "gpu-hours", "--format", "csv", "-o", "json")
	// A tenant admin may not read the platform's report.
	h.code(cli.ExitAuth, h.e.A.AdminKey, "report", "gpu-hours")

	// The month-close report charges what is held: tenant B held a dedicated H100 for two hours
	// without any CUDA session (no usage at all), which the utilisation report cannot show.
	h.ok(h.e.Finance, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "dedicated", "--unit-price", "2.50", "--effective-from", "2026-03")
	if _, err := h.e.Store.Pool.Exec(context.Background(), `INSERT INTO billing_allocations (tenant_id, instance_id, kind,
		resource_id, tier, gpu_model, quantity, started_at, ended_at) VALUES ($1, gen_random_uuid(), 'gpu', 'idle-gpu', 'dedicated', 'H100', 1, $2, $3)`,
		h.e.B.ID, start, start.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	h.jsonOf(&rep, h.e.Finance, "report", "gpu-hours", "--from", "2026-03", "--to", "2026-04", "-o", "json")
	if rep.Total.RevenueCents != 375 {
		t.Fatalf("utilisation value %+v, want A's 1.5 GPU-hours at 2.50", rep.Total)
	}
	var bill sdk.BillingReport
	h.jsonOf(&bill, h.e.Finance, "report", "billing", "--from", "2026-03", "--to", "2026-04", "--group-by", "tenant", "-o", "json")
	got := map[string]sdk.BillingReportRow{}
	for _, r := range bill.Rows {
		got[r.Group["tenant"]] = r
	}
	if a, b := got[h.e.A.ID], got[h.e.B.ID]; len(bill.Rows) != 2 || a.RevenueCents != 375 || a.UtilisedGPUHours != "1.500000" ||
		b.RevenueCents != 500 || b.HeldGPUHours != "2.000000" || b.UtilisedGPUHours != "0.000000" || bill.Total.RevenueCents != 875 {
		t.Fatalf("month-close report %+v", bill)
	}
	if out := h.ok(h.e.Finance, "report", "billing", "--from", "2026-03", "--to", "2026-04", "--group-by", "tier,gpu_model"); !strings.Contains(out, "dedicated / H100") ||
		!strings.Contains(out, "8.75 USD") || !strings.Contains(out, "TOTAL") || !strings.Contains(out, "3.500000") {
		t.Fatalf("month-close table:\n%s", out)
	}
	if csv := h.ok(h.e.Finance, "report", "billing", "--from", "2026-03", "--to", "2026-04", "--format", "csv"); !strings.Contains(csv, h.e.B.ID) {
		t.Fatalf("month-close CSV lacks tenant B:\n%s", csv)
	}
	h.code(cli.ExitInvalid, h.e.Finance, "report", "billing", "--group-by", "colour")
	h.code(cli.ExitUsage, h.e.Finance, "report", "billing", "--format", "xml")
	h.code(cli.ExitAuth, h.e.B.AdminKey, "report", "billing")
}

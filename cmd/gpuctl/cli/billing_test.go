package cli_test

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
)

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// billingHarness: tenant A used 90 dedicated GPU-minutes on March 10th 2026, tenant B 30.
func billingHarness(t *testing.T) *harness {
	h := newHarness(t)
	m := h.e.Meter(t, "gs-cli")
	at := march.Add(9*24*time.Hour + 8*time.Hour)
	m.GPU(t, h.e.A.ID, "H100", "dedicated", at, time.Hour)
	m.GPU(t, h.e.A.ID, "H100", "dedicated", at.Add(2*time.Hour), 30*time.Minute)
	m.GPU(t, h.e.B.ID, "H100", "dedicated", at, 30*time.Minute)
	return h
}

func TestPricesCommands(t *testing.T) {
	h := billingHarness(t)
	fin := h.e.Finance
	var p sdk.Price
	h.jsonOf(&p, fin, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "dedicated", "--unit-price", "2.50", "--effective-from", "2026-03")
	if p.UnitPriceMicros != 2_500_000 || p.Unit != "gpu-hour" || !p.EffectiveFrom.Equal(march) {
		t.Fatalf("added %+v", p)
	}
	out := h.ok(fin, "prices", "add", "--kind", "vm", "--instance-type", "cpu-small", "--unit-price", "0.055", "--effective-from", "2026-03-01T00:00:00Z")
	if !strings.Contains(out, "0.055 USD/vm-hour") || !strings.Contains(out, "cpu-small") {
		t.Fatalf("add table:\n%s", out)
	}
	// Bad flags are refused before any request: the endpoint here accepts no connection.
	offline := map[string]string{"GPUCLOUD_API_URL": "http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"--kind", "tpu", "--unit-price", "1", "--effective-from", "2026-03"},
		{"--kind", "gpu", "--tier", "dedicated", "--unit-price", "1", "--effective-from", "2026-03"},
		{"--kind", "gpu", "--gpu-model", "H100", "--tier", "premium", "--unit-price", "1", "--effective-from", "2026-03"},
		{"--kind", "vm", "--instance-type", "x", "--tier", "shared", "--unit-price", "1", "--effective-from", "2026-03"},
		{"--kind", "vm", "--instance-type", "x", "--unit-price", "2,50", "--effective-from", "2026-03"},
		{"--kind", "vm", "--instance-type", "x", "--unit-price", "-1", "--effective-from", "2026-03"},
		{"--kind", "vm", "--instance-type", "x", "--unit-price", "1", "--effective-from", "2026-03-01T00:30:00Z"},
		{"--kind", "vm", "--instance-type", "x", "--unit-price", "1", "--effective-from", "next week"},
		{"--kind", "vm", "--instance-type", "x", "--effective-from", "2026-03"},
	} {
		if msg := h.with(offline).code(cli.ExitUsage, fin, append([]string{"prices", "add"}, args...)...); strings.Contains(msg, "127.0.0.1") {
			t.Fatalf("prices add %v sent a request: %s", args, msg)
		}
	}
	// The API's refusals: a duplicate entry, a tenant adding one.
	h.code(cli.ExitInvalid, fin, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "dedicated", "--unit-price", "3", "--effective-from", "2026-03")
	h.code(cli.ExitAuth, h.e.A.AdminKey, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "shared", "--unit-price", "3", "--effective-from", "2026-03")

	var book []sdk.Price
	h.jsonOf(&book, h.e.A.AdminKey, "prices", "list")
	if len(book) != 2 {
		t.Fatalf("book %+v", book)
	}
	var fromYAML []map[string]any
	if err := yaml.Unmarshal([]byte(h.ok(h.e.B.AdminKey, "prices", "list", "-o", "yaml")), &fromYAML); err != nil ||
		len(fromYAML) != 2 || fromYAML[0]["unit_price_micros"] == nil {
		t.Fatalf("yaml book: %v %+v", err, fromYAML)
	}
	if out := h.ok(h.e.B.AdminKey, "prices", "list"); !strings.Contains(out, "2.50 USD/gpu-hour") || !strings.Contains(out, "EFFECTIVE FROM") {
		t.Fatalf("table book:\n%s", out)
	}
}

func TestUsageCommand(t *testing.T) {
	h := billingHarness(t)
	var u sdk.Usage
	h.jsonOf(&u, h.e.A.AdminKey, "usage", "--from", "2026-03", "--to", "2026-04", "--granularity", "month")
	if u.TenantID != h.e.A.ID || len(u.Rows) != 1 || u.Rows[0].Bucket != "2026-03" || u.Rows[0].GPUHours != "1.500000" {
		t.Fatalf("A's usage %+v", u)
	}
	out := h.ok(h.e.Finance, "usage", "--tenant", h.e.B.ID, "--from", "2026-03-01", "--to", "2026-04-01")
	if !strings.Contains(out, "2026-03-10") || !strings.Contains(out, "0.500000") || strings.Contains(out, "1.500000") {
		t.Fatalf("B's usage for finance:\n%s", out)
	}
	var y map[string]any
	if err := yaml.Unmarshal([]byte(h.ok(h.e.A.AdminKey, "usage", "--from", "2026-03", "-o", "yaml")), &y); err != nil || y["tenant_id"] != h.e.A.ID {
		t.Fatalf("yaml usage: %v %+v", err, y)
	}
	h.code(cli.ExitNotFound, h.e.A.AdminKey, "usage", "--tenant", h.e.B.ID)
	h.code(cli.ExitInvalid, h.e.Finance, "usage") // platform roles name the tenant
	h.code(cli.ExitUsage, h.e.A.AdminKey, "usage", "--granularity", "week")
	h.code(cli.ExitUsage, h.e.A.AdminKey, "usage", "--from", "March")
	h.code(cli.ExitUsage, h.e.Finance, "usage", "--tenant", "acme")
}

func TestInvoicesAndPeriodsCommands(t *testing.T) {
	h := billingHarness(t)
	fin, a, b := h.e.Finance, h.e.A.AdminKey, h.e.B.AdminKey
	h.code(cli.ExitInvalid, fin, "periods", "close", h.e.A.ID, "2026-03") // usage without a price
	h.ok(fin, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "dedicated", "--unit-price", "2.50", "--effective-from", "2026-03")

	out := h.ok(fin, "periods", "close", h.e.A.ID, "2026-03")
	if !strings.Contains(out, "3.75 USD") || !strings.Contains(out, "1.500000 gpu-hour") || !strings.Contains(out, "2.50") {
		t.Fatalf("close table:\n%s", out)
	}
	var invB sdk.Invoice
	h.jsonOf(&invB, fin, "periods", "close", h.e.B.ID, "2026-03")
	if invB.TotalCents != 125 || len(invB.Lines) != 1 {
		t.Fatalf("B's invoice %+v", invB)
	}
	h.code(cli.ExitInvalid, fin, "periods", "close", h.e.A.ID, "2026-03") // closed already
	h.code(cli.ExitInvalid, fin, "periods", "close", h.e.A.ID, "2099-01") // not over
	h.code(cli.ExitAuth, a, "periods", "close", h.e.A.ID, "2026-04")
	h.code(cli.ExitUsage, fin, "periods", "close", h.e.A.ID, "2026-3x")
	h.code(cli.ExitUsage, fin, "periods", "close", "acme", "2026-03")
	h.code(cli.ExitUsage, fin, "periods", "close", h.e.A.ID)

	// Tenants see their own invoices only; finance all, or one tenant's.
	var list []sdk.Invoice
	h.jsonOf(&list, a, "invoices", "list")
	if len(list) != 1 || list[0].TenantID != h.e.A.ID || list[0].TotalCents != 375 {
		t.Fatalf("A's invoices %+v", list)
	}
	invA := list[0]
	h.jsonOf(&list, fin, "invoices", "list")
	if len(list) != 2 {
		t.Fatalf("finance's invoices %+v", list)
	}
	h.jsonOf(&list, fin, "invoices", "list", "--tenant", h.e.B.ID, "--limit", "5")
	if len(list) != 1 || list[0].ID != invB.ID {
		t.Fatalf("B's invoices for finance %+v", list)
	}
	h.code(cli.ExitNotFound, a, "invoices", "get", invB.ID)
	h.code(cli.ExitNotFound, a, "invoices", "list", "--tenant", h.e.B.ID)
	h.code(cli.ExitUsage, fin, "invoices", "list", "--limit", "1001")
	h.code(cli.ExitUsage, fin, "invoices", "get", "INV-1")
	h.code(cli.ExitNotFound, fin, "invoices", "get", "00000000-0000-4000-8000-000000000000")

	var got sdk.Invoice
	h.jsonOf(&got, b, "invoices", "get", invB.ID)
	if got.ID != invB.ID || len(got.Lines) != 1 || got.Lines[0].AmountCents != 125 {
		t.Fatalf("B's invoice for B %+v", got)
	}
	rows, err := csv.NewReader(strings.NewReader(h.ok(b, "invoices", "get", invB.ID, "--format", "csv"))).ReadAll()
	if err != nil || len(rows) != 2 || rows[0][0] != "invoice_id" || rows[1][0] != invB.ID || rows[1][14] != "125" {
		t.Fatalf("B's invoice as CSV: %q %v", rows, err)
	}
	h.code(cli.ExitUsage, b, "invoices", "get", invB.ID, "--format", "pdf")
	if out := h.ok(b, "__complete", "invoices", "get", ""); !strings.Contains(out, invB.ID+"\t2026-03 1.25 USD") || strings.Contains(out, invA.ID) {
		t.Fatalf("completion of B's invoice ids:\n%s", out)
	}
	var y map[string]any
	if err := yaml.Unmarshal([]byte(h.ok(b, "invoices", "get", invB.ID, "-o", "yaml")), &y); err != nil || y["total"] != "1.25" {
		t.Fatalf("yaml invoice: %v %+v", err, y)
	}

	// Periods: every month with usage is listed; closing one moves it from open to closed.
	h.ok(fin, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "shared", "--unit-price", "0.055", "--effective-from", "2026-03")
	h.e.Meter(t, "gs-april").GPU(t, h.e.B.ID, "H100", "shared", march.AddDate(0, 1, 2), time.Hour)
	var open []sdk.Period
	h.jsonOf(&open, fin, "periods", "list", "--status", "open")
	if len(open) != 1 || open[0].TenantID != h.e.B.ID || open[0].Period != "2026-04" || !open[0].Ended {
		t.Fatalf("open periods %+v", open)
	}
	var periods []sdk.Period
	h.jsonOf(&periods, fin, "periods", "list")
	if len(periods) != 3 || periods[0].Period != "2026-04" || periods[1].Status != "closed" || periods[2].InvoiceID == "" {
		t.Fatalf("periods %+v", periods)
	}
	out = h.ok(b, "periods", "list")
	if !strings.Contains(out, "2026-03") || !strings.Contains(out, invB.ID) || !strings.Contains(out, "1.25") ||
		!strings.Contains(out, "open") || strings.Contains(out, h.e.A.ID) {
		t.Fatalf("B's periods:\n%s", out)
	}
	h.code(cli.ExitNotFound, a, "periods", "list", "--tenant", h.e.B.ID)
	h.code(cli.ExitUsage, fin, "periods", "list", "--status", "draft")
	var apr sdk.Invoice
	h.jsonOf(&apr, fin, "periods", "close", h.e.B.ID, "2026-04")
	if apr.TotalCents != 55 { // the shared tier's 10 GiB slice x 1 h x 0.055
		t.Fatalf("B's April %+v", apr)
	}
	h.jsonOf(&open, fin, "periods", "list", "--status", "open")
	if len(open) != 0 {
		t.Fatalf("open after closing %+v", open)
	}
}

// with returns a harness whose environment has env's entries on top.
func (h *harness) with(env map[string]string) *harness {
	c := &harness{t: h.t, e: h.e, env: map[string]string{}}
	for k, v := range h.env {
		c.env[k] = v
	}
	for k, v := range env {
		c.env[k] = v
	}
	return c
}

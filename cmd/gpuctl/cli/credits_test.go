package cli_test

import (
	"strings"
	"testing"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
)

// Storage prices, credit grants, the balance, budgets, webhooks and close-all through gpuctl.
func TestCreditsBudgetWebhookCommands(t *testing.T) {
	h := billingHarness(t)
	fin, a, b := h.e.Finance, h.e.A.AdminKey, h.e.B.AdminKey
	h.ok(fin, "prices", "add", "--kind", "gpu", "--gpu-model", "H100", "--tier", "dedicated", "--unit-price", "2.00", "--effective-from", "2026-03")
	if out := h.ok(fin, "prices", "add", "--kind", "storage", "--unit-price", "0.0001", "--effective-from", "2026-03"); !strings.Contains(out, "gib-hour") {
		t.Fatalf("storage price:\n%s", out)
	}
	h.code(cli.ExitUsage, fin, "prices", "add", "--kind", "storage", "--tier", "shared", "--unit-price", "1", "--effective-from", "2026-03")

	var g sdk.CreditGrant
	h.jsonOf(&g, fin, "credits", "grant", h.e.A.ID, "--amount", "2.50", "--priority", "5")
	if g.AmountCents != 250 || g.Priority != 5 || g.TenantID != h.e.A.ID {
		t.Fatalf("grant %+v", g)
	}
	h.code(cli.ExitUsage, fin, "credits", "grant", h.e.A.ID, "--amount", "2.505")
	h.code(cli.ExitAuth, a, "credits", "grant", h.e.A.ID, "--amount", "1")
	if out := h.ok(a, "balance"); !strings.Contains(out, "2.50 USD") {
		t.Fatalf("balance:\n%s", out)
	}
	h.code(cli.ExitNotFound, b, "balance", "--tenant", h.e.A.ID)

	var bud sdk.Budget
	h.jsonOf(&bud, a, "budget", "set", "--limit", "100.00", "--thresholds", "50,90", "--hard-stop", "block_create")
	if bud.LimitCents != 10000 || len(bud.Thresholds) != 2 || bud.HardStop != "block_create" {
		t.Fatalf("budget %+v", bud)
	}
	h.code(cli.ExitInvalid, a, "budget", "set", "--limit", "100.00", "--hard-stop", "explode")

	var w sdk.Webhook
	h.jsonOf(&w, a, "webhooks", "create", "https://example.com/hook", "--events", "budget.threshold,instance.state")
	if !strings.HasPrefix(w.Secret, "whsec_") || len(w.Events) != 2 {
		t.Fatalf("webhook %+v", w)
	}
	if out := h.ok(b, "webhooks", "list"); strings.Contains(out, w.ID) {
		t.Fatalf("B lists A's webhook:\n%s", out)
	}
	h.ok(a, "webhooks", "deliveries", w.ID)
	h.ok(a, "webhooks", "delete", w.ID)

	var job sdk.CloseJob
	h.jsonOf(&job, fin, "periods", "close-all", "2026-03")
	if job.Status != "done" || job.Closed != 2 {
		t.Fatalf("close-all %+v", job)
	}
	var invs []sdk.Invoice
	h.jsonOf(&invs, a, "invoices", "list")
	if len(invs) != 1 || invs[0].TotalCents != 300 || invs[0].CreditCents != 250 {
		t.Fatalf("A's invoices %+v", invs)
	}
}

package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/internal/authn"
)

// Credits, balance, budgets and webhooks over HTTP: finance grants, each tenant sees only its
// own, bad input is a 400 naming the field.
func TestCreditsBudgetsWebhooksIsolated(t *testing.T) {
	h, pool := newServerPool(t)
	a, b := uuid.New(), uuid.New()
	alice := caller{role: authn.RoleTenantAdmin, tenant: a}
	amember := caller{role: authn.RoleTenantMember, tenant: a}
	bob := caller{role: authn.RoleTenantAdmin, tenant: b}
	// The clock is April 10th: a held 10 GPU-hours of April at 1.00.
	holdGPU(t, pool, a, "H100", march.AddDate(0, 1, 0), 10*time.Hour)
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", map[string]any{"kind": "gpu", "gpu_model": "H100", "tier": "dedicated",
		"unit_price_micros": 1_000_000, "effective_from": "2026-01-01T00:00:00Z"}), 201)

	if w := do(t, h, alice, "POST", "/v1/credits", map[string]any{"tenant_id": a.String(), "amount_cents": 5000}); w.Code != 403 {
		t.Fatalf("tenant granted itself credit: %d", w.Code)
	}
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/credits", map[string]any{"tenant_id": a.String(), "amount_cents": 5000, "priority": 1}), 201)
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/credits", map[string]any{"tenant_id": b.String(), "amount_cents": 70}), 201)
	for body, field := range map[string]string{
		`{"tenant_id":"` + a.String() + `","amount_cents":0}`:                                     "amount_cents",
		`{"tenant_id":"x","amount_cents":5}`:                                                      "tenant_id",
		`{"tenant_id":"` + a.String() + `","amount_cents":5,"expires_at":"2020-01-01T00:00:00Z"}`: "expires_at",
		`{"tenant_id":"` + a.String() + `","amount_cents":5,"priority":-1}`:                       "priority",
		`{"tenant_id":"` + a.String() + `","amount_cents":5,"colour":1}`:                          "colour",
	} {
		if w := do(t, h, finance, "POST", "/v1/credits", body); w.Code != 400 || !strings.Contains(w.Body.String(), field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, w.Code, w.Body, field)
		}
	}
	bal := decode[struct {
		Balance struct {
			CreditCents      int64 `json:"credit_cents"`
			UnbilledCents    int64 `json:"unbilled_cents"`
			MonthToDateCents int64 `json:"month_to_date_cents"`
			BalanceCents     int64 `json:"balance_cents"`
		} `json:"balance"`
	}](t, do(t, h, amember, "GET", "/v1/balance", nil), 200)
	if bal.Balance.CreditCents != 5000 || bal.Balance.UnbilledCents != 1000 || bal.Balance.MonthToDateCents != 1000 || bal.Balance.BalanceCents != 4000 {
		t.Fatalf("alice's balance %+v", bal)
	}
	if w := do(t, h, alice, "GET", "/v1/balance?tenant_id="+b.String(), nil); w.Code != 404 {
		t.Fatalf("alice reads bob's balance: %d", w.Code)
	}
	if w := do(t, h, finance, "GET", "/v1/balance", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "tenant_id") {
		t.Fatalf("finance balance without tenant: %d %s", w.Code, w.Body)
	}
	credits := decode[struct{ Items []map[string]any }](t, do(t, h, bob, "GET", "/v1/credits", nil), 200)
	if len(credits.Items) != 1 || credits.Items[0]["tenant_id"] != b.String() {
		t.Fatalf("bob's credits %+v", credits)
	}

	// Budgets: a tenant admin sets its own; a member may not; bad input names its field.
	if w := do(t, h, amember, "PUT", "/v1/budget", map[string]any{"limit_cents": 100}); w.Code != 403 {
		t.Fatalf("member set a budget: %d", w.Code)
	}
	decode[map[string]any](t, do(t, h, alice, "PUT", "/v1/budget", map[string]any{"limit_cents": 2000, "thresholds": []int{50, 90}, "hard_stop": "block_create"}), 200)
	for body, field := range map[string]string{`{"limit_cents":0}`: "limit_cents", `{"limit_cents":5,"thresholds":[80,50]}`: "thresholds",
		`{"limit_cents":5,"hard_stop":"explode"}`: "hard_stop"} {
		if w := do(t, h, alice, "PUT", "/v1/budget", body); w.Code != 400 || !strings.Contains(w.Body.String(), field) {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	if w := do(t, h, bob, "GET", "/v1/budget", nil); w.Code != 404 {
		t.Fatalf("bob has no budget: %d", w.Code)
	}
	if w := do(t, h, finance, "GET", "/v1/budget?tenant_id="+a.String(), nil); w.Code != 200 || !strings.Contains(w.Body.String(), "block_create") {
		t.Fatalf("finance reads alice's budget: %d %s", w.Code, w.Body)
	}

	// Webhooks: own only; finance sees all.
	hook := decode[struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
		Owner  string `json:"owner"`
	}](t, do(t, h, alice, "POST", "/v1/webhooks", map[string]any{"url": "https://example.com/hook", "events": []string{"budget.threshold", "instance.state"}}), 201)
	if !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("webhook %+v", hook)
	}
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/webhooks", map[string]any{"url": "https://finance.example.com/", "events": []string{"invoice.closed"}}), 201)
	for body, field := range map[string]string{`{"url":"ftp://x","events":["invoice.closed"]}`: "url",
		`{"url":"https://x.example","events":["invoice.paid"]}`: "events", `{"url":"https://x.example","events":[]}`: "events",
		`{"url":"https://x.example","events":["credit.low"],"tenant_id":"` + b.String() + `"}`: "tenant_id"} {
		if w := do(t, h, alice, "POST", "/v1/webhooks", body); w.Code != 400 || !strings.Contains(w.Body.String(), field) {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	if l := decode[struct{ Items []map[string]any }](t, do(t, h, bob, "GET", "/v1/webhooks", nil), 200); len(l.Items) != 0 {
		t.Fatalf("bob sees webhooks %+v", l)
	}
	// Finance's endpoint for alice's events is finance's: alice neither sees nor deletes it.
	watch := decode[struct {
		ID    string `json:"id"`
		Owner string `json:"owner"`
	}](t, do(t, h, finance, "POST", "/v1/webhooks", map[string]any{"url": "https://finance.example.com/a", "events": []string{"credit.low"}, "tenant_id": a.String()}), 201)
	if watch.Owner != "finance" || hook.Owner != "tenant" {
		t.Fatalf("owners: finance's %q, alice's %q", watch.Owner, hook.Owner)
	}
	if l := decode[struct{ Items []map[string]any }](t, do(t, h, alice, "GET", "/v1/webhooks", nil), 200); len(l.Items) != 1 || l.Items[0]["id"] != hook.ID {
		t.Fatalf("alice sees %+v, want only her own endpoint", l)
	}
	for _, m := range []string{"GET /v1/webhooks/" + watch.ID + "/deliveries", "DELETE /v1/webhooks/" + watch.ID} {
		parts := strings.SplitN(m, " ", 2)
		if w := do(t, h, alice, parts[0], parts[1], nil); w.Code != 404 {
			t.Errorf("alice %s on finance's endpoint for her: %d, want 404", m, w.Code)
		}
	}
	if l := decode[struct{ Items []map[string]any }](t, do(t, h, finance, "GET", "/v1/webhooks", nil), 200); len(l.Items) != 3 || l.Items[0]["secret"] != nil {
		t.Fatalf("finance sees %+v", l)
	}
	for _, m := range []string{"GET /v1/webhooks/" + hook.ID + "/deliveries", "DELETE /v1/webhooks/" + hook.ID} {
		parts := strings.SplitN(m, " ", 2)
		if w := do(t, h, bob, parts[0], parts[1], nil); w.Code != 404 {
			t.Errorf("bob %s: %d", m, w.Code)
		}
	}
	decode[map[string]any](t, do(t, h, alice, "GET", "/v1/webhooks/"+hook.ID+"/deliveries", nil), 200)
	if w := do(t, h, alice, "DELETE", "/v1/webhooks/"+hook.ID, nil); w.Code != 204 {
		t.Fatalf("alice deletes her webhook: %d", w.Code)
	}
}

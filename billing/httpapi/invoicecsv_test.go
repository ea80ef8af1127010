package httpapi_test

import (
	"encoding/csv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/internal/authn"
)

// GET /v1/invoices/{id} as CSV: one row per line whose amounts add up to the invoice's total,
// for its tenant only; a GPU model that looks like a formula is defused.
func TestInvoiceCSV(t *testing.T) {
	h, pool := newServerPool(t)
	a, b := uuid.New(), uuid.New()
	holdGPU(t, pool, a, "H100", march.Add(time.Hour), 2*time.Hour)
	holdGPU(t, pool, a, "=HYPERLINK(1)", march.Add(time.Hour), 30*time.Minute)
	formula := record("formula", a, march.Add(time.Hour), 30*time.Minute)
	formula.GPUModel = "=HYPERLINK(1)"
	decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{
		record("a1", a, march.Add(time.Hour), 2*time.Hour), formula}}), 200)
	for _, m := range []string{"H100", "=HYPERLINK(1)"} {
		decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", map[string]any{"kind": "gpu", "gpu_model": m,
			"tier": "dedicated", "unit_price_micros": 1_250_000, "effective_from": "2026-01-01T00:00:00Z"}), 201)
	}
	inv := decode[invoiceJSON](t, do(t, h, finance, "POST", "/v1/periods/close", map[string]string{"tenant_id": a.String(), "period": "2026-03"}), 201)

	alice := caller{role: authn.RoleTenantMember, tenant: a}
	for _, how := range [][]string{{"?format=csv"}, {"", "Accept", "text/csv"}} {
		w := do(t, h, alice, "GET", "/v1/invoices/"+inv.ID.String()+how[0], nil, how[1:]...)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") ||
			!strings.Contains(w.Header().Get("Content-Disposition"), "invoice_2026-03_"+inv.ID.String()+".csv") {
			t.Fatalf("csv %v: %d %v", how, w.Code, w.Header())
		}
		recs, err := csv.NewReader(w.Body).ReadAll()
		if err != nil || len(recs) != 3 || recs[0][0] != "invoice_id" || recs[0][15] != "amount_USD" {
			t.Fatalf("csv %v: %q %v", how, recs, err)
		}
		var sum int64
		for _, r := range recs[1:] {
			if r[0] != inv.ID.String() || r[1] != a.String() || r[2] != "2026-03" || strings.HasPrefix(r[7], "=") {
				t.Fatalf("row %q", r)
			}
			n, _ := strconv.ParseInt(r[14], 10, 64)
			sum += n
		}
		if sum != inv.TotalCents || sum != 313 { // 2 h + 0.5 h at 1.25
			t.Fatalf("lines sum to %d, invoice total %d", sum, inv.TotalCents)
		}
	}
	if w := do(t, h, caller{role: authn.RoleTenantAdmin, tenant: b}, "GET", "/v1/invoices/"+inv.ID.String()+"?format=csv", nil); w.Code != 404 {
		t.Fatalf("another tenant's invoice as CSV: %d", w.Code)
	}
	if w := do(t, h, alice, "GET", "/v1/invoices/"+inv.ID.String()+"?format=pdf", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "format") {
		t.Fatalf("format pdf: %d %s", w.Code, w.Body)
	}
}

package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/internal/authn"
)

type periodJSON struct {
	TenantID   uuid.UUID  `json:"tenant_id"`
	Period     string     `json:"period"`
	Status     string     `json:"status"`
	Ended      bool       `json:"ended"`
	InvoiceID  *uuid.UUID `json:"invoice_id"`
	TotalCents *int64     `json:"total_cents"`
}

// GET /v1/periods: months with usage are open until closed; the clock is April 10th 2026, so
// March has ended and April has not. Tenants see their own months only.
func TestListPeriods(t *testing.T) {
	h, pool := newServerPool(t)
	a, b := uuid.New(), uuid.New()
	alice := caller{role: authn.RoleTenantAdmin, tenant: a}
	april := march.AddDate(0, 1, 0)
	holdGPU(t, pool, a, "H100", march.Add(time.Hour), time.Hour)
	decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{
		record("a-mar", a, march.Add(time.Hour), time.Hour), record("a-apr", a, april.Add(time.Hour), time.Hour),
		record("b-mar", b, march.Add(time.Hour), 2*time.Hour),
	}}), 200)
	list := func(who caller, q string) []periodJSON {
		t.Helper()
		return decode[struct{ Items []periodJSON }](t, do(t, h, who, "GET", "/v1/periods"+q, nil), 200).Items
	}
	all := list(finance, "")
	if len(all) != 3 || all[0].Period != "2026-04" || all[0].Ended || all[0].Status != "open" ||
		all[1].Period != "2026-03" || !all[1].Ended || all[1].InvoiceID != nil {
		t.Fatalf("all periods %+v", all)
	}

	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", map[string]any{"kind": "gpu", "gpu_model": "H100",
		"tier": "dedicated", "unit_price_micros": 1_000_000, "effective_from": "2026-01-01T00:00:00Z"}), 201)
	inv := decode[invoiceJSON](t, do(t, h, finance, "POST", "/v1/periods/close", map[string]string{"tenant_id": a.String(), "period": "2026-03"}), 201)

	closed := list(finance, "?status=closed")
	if len(closed) != 1 || closed[0].TenantID != a || closed[0].InvoiceID == nil || *closed[0].InvoiceID != inv.ID ||
		closed[0].TotalCents == nil || *closed[0].TotalCents != 100 {
		t.Fatalf("closed periods %+v", closed)
	}
	open := list(finance, "?status=open&tenant_id="+b.String())
	if len(open) != 1 || open[0].TenantID != b || open[0].Period != "2026-03" || open[0].Status != "open" {
		t.Fatalf("b's open periods %+v", open)
	}
	own := list(alice, "")
	if len(own) != 2 || own[0].TenantID != a || own[1].TenantID != a || own[1].Status != "closed" {
		t.Fatalf("alice's periods %+v", own)
	}
	if got := list(finance, "?limit=1"); len(got) != 1 {
		t.Fatalf("limit 1: %+v", got)
	}
	// Cursor paging, one period a page, walks every period once in order.
	var walked []string
	for cursor, pages := "", 0; pages < 10; pages++ {
		page := decode[struct {
			Items      []periodJSON
			NextCursor string `json:"next_cursor"`
		}](t, do(t, h, finance, "GET", "/v1/periods?limit=1&cursor="+cursor, nil), 200)
		for _, p := range page.Items {
			walked = append(walked, p.Period+"/"+p.TenantID.String())
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(walked) != len(all) {
		t.Fatalf("paged %v, want %d periods", walked, len(all))
	}
	for i, p := range all {
		if walked[i] != p.Period+"/"+p.TenantID.String() {
			t.Fatalf("page %d is %s, want %s", i, walked[i], p.Period+"/"+p.TenantID.String())
		}
	}
	if w := do(t, h, finance, "GET", "/v1/periods?cursor=!!", nil); w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"cursor"`) {
		t.Fatalf("bad cursor: %d %s", w.Code, w.Body)
	}
	for q, status := range map[string]int{"?tenant_id=" + b.String(): 404, "?status=draft": 400, "?limit=0": 400} {
		if w := do(t, h, alice, "GET", "/v1/periods"+q, nil); w.Code != status {
			t.Errorf("alice %s: %d, want %d", q, w.Code, status)
		}
	}
	if w := do(t, h, dmn, "GET", "/v1/periods", nil); w.Code != 403 {
		t.Fatalf("daemon lists periods: %d", w.Code)
	}
}

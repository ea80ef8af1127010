package httpapi_test

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/internal/authn"
)

// GET /v1/reports/billing: finance and operators only; JSON and CSV; a bad dimension is a 400
// naming group_by.
func TestHeldReportRoute(t *testing.T) {
	h, pool := newServerPool(t)
	a := uuid.New()
	holdGPU(t, pool, a, "H100", march.Add(time.Hour), 2*time.Hour)
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", map[string]any{"kind": "gpu", "gpu_model": "H100", "tier": "dedicated",
		"unit_price_micros": 1_000_000, "effective_from": "2026-01-01T00:00:00Z"}), 201)
	if w := do(t, h, caller{role: authn.RoleTenantAdmin, tenant: a}, "GET", "/v1/reports/billing", nil); w.Code != 403 {
		t.Fatalf("tenant read the month-close report: %d", w.Code)
	}
	type rep struct {
		Rows []struct {
			Group        map[string]string `json:"group"`
			HeldGPUHours string            `json:"held_gpu_hours"`
			RevenueCents int64             `json:"revenue_cents"`
		} `json:"rows"`
	}
	r := decode[rep](t, do(t, h, finance, "GET", "/v1/reports/billing?from=2026-03&to=2026-04&group_by=tier,gpu_model", nil), 200)
	if len(r.Rows) != 1 || r.Rows[0].Group["tier"] != "dedicated" || r.Rows[0].Group["gpu_model"] != "H100" ||
		r.Rows[0].HeldGPUHours != "2.000000" || r.Rows[0].RevenueCents != 200 {
		t.Fatalf("report %+v", r)
	}
	w := do(t, h, caller{role: authn.RoleOperator}, "GET", "/v1/reports/billing?from=2026-03&to=2026-04&format=csv", nil)
	recs, err := csv.NewReader(w.Body).ReadAll()
	if w.Code != 200 || err != nil || len(recs) != 2 || recs[0][0] != "tenant" || recs[1][0] != a.String() {
		t.Fatalf("csv %d %q %v", w.Code, recs, err)
	}
	for _, q := range []string{"group_by=region", "group_by=tenant,tenant", "from=2026-13", "format=xml"} {
		w := do(t, h, finance, "GET", "/v1/reports/billing?"+q, nil)
		field := strings.SplitN(q, "=", 2)[0]
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"`+field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", q, w.Code, w.Body, field)
		}
	}
}

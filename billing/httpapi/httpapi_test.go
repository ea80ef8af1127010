package httpapi_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/httpapi"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(pgtest.Main(m))
}

var (
	march  = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	daemon = uuid.MustParse("00000000-0000-4000-8000-00000000d00d")
)

// caller is who a test request acts as; the middleware below stands in for the apiserver's auth.
type caller struct {
	role   authn.Role
	tenant uuid.UUID
}

func newServer(t *testing.T) *gin.Engine {
	h, _ := newServerPool(t)
	return h
}

// newServerPool is newServer with its database, for tests that write what tenants hold.
func newServerPool(t *testing.T) (*gin.Engine, *pgxpool.Pool) {
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	svc := httpapi.New(pool, everyPlacement{}, nil)
	svc.SetClock(func() time.Time { return time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC) })
	r := gin.New()
	g := r.Group("/v1", func(c *gin.Context) {
		role := c.GetHeader("X-Test-Role")
		if role == "" {
			return
		}
		p := authn.Principal{Role: authn.Role(role)}
		if v := c.GetHeader("X-Test-Tenant"); v != "" {
			p.TenantID = uuid.MustParse(v)
		}
		if p.Role == authn.RoleDaemon {
			p.DaemonID, p.Daemon = daemon, authn.DaemonGPUServer
		}
		c.Request = c.Request.WithContext(authn.WithPrincipal(c.Request.Context(), p))
	})
	svc.Mount(g)
	return r, pool
}

// holdGPU records that tenant held one dedicated H100 over [start, start+d).
func holdGPU(t *testing.T, pool *pgxpool.Pool, tenant uuid.UUID, model string, start time.Time, d time.Duration) {
	a := billingtest.Dedicated(tenant, 1, start, d)
	a.GPUModel = model
	billingtest.Hold(t, pool, a)
}

func do(t *testing.T, h http.Handler, who caller, method, path string, body any, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd).WithContext(context.Background())
	if who.role != "" {
		req.Header.Set("X-Test-Role", string(who.role))
	}
	if who.tenant != uuid.Nil {
		req.Header.Set("X-Test-Tenant", who.tenant.String())
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder, status int) T {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %s: %v", w.Body, err)
	}
	return v
}

// everyPlacement is a test double for the control plane: every tenant exists and the daemon may
// bill every instance. The real checks (store.AuthorizeUsage, store.TenantExists) are tested
// in apiserver/server, where tenants and instances exist.
type everyPlacement struct{}

func (everyPlacement) AuthorizeUsage(_ context.Context, _ authn.Principal, recs []api.UsageRecord) ([]string, error) {
	return make([]string, len(recs)), nil
}

func (everyPlacement) TenantExists(context.Context, uuid.UUID) (bool, error) { return true, nil }

// record is a gpu record of the test's GPU server daemon, in its id namespace.
func record(id string, tenant uuid.UUID, start time.Time, d time.Duration) api.UsageRecord {
	r := billingtest.GPU(daemon.String()+"/"+id, tenant, start, d)
	r.Source = daemon.String()
	return r
}

var (
	dmn     = caller{role: authn.RoleDaemon}
	finance = caller{role: authn.RoleFinance}
)

func TestPostUsage(t *testing.T) {
	h := newServer(t)
	tenant := uuid.New()
	good := record("g1", tenant, march, time.Hour)
	forged := record("forged", tenant, march, time.Hour)
	forged.Source = "someone-else"
	foreignID := record("x", tenant, march, time.Hour)
	foreignID.ID = "00000000-0000-4000-8000-0000000000aa/sess/1" // another daemon's namespace
	vm := billingtest.VM(daemon.String()+"/vm", tenant, march, time.Hour)
	vm.Source = daemon.String()
	body := fmt.Sprintf(`{"records":[%s,{"id":"typed","gpu_count":"four"},%s,%s,%s,%s]}`,
		mustJSON(good), mustJSON(forged), mustJSON(good), mustJSON(foreignID), mustJSON(vm))
	res := decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", body), 200)
	if res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 4 {
		t.Fatalf("%+v, want 1 accepted 1 duplicate 4 rejected", res)
	}
	if res.Rejected[0].Index != 1 || !strings.Contains(res.Rejected[0].Reason, "gpu_count") ||
		res.Rejected[1].Index != 2 || !strings.HasPrefix(res.Rejected[1].Reason, "source:") ||
		res.Rejected[2].Index != 4 || !strings.HasPrefix(res.Rejected[2].Reason, "id:") ||
		res.Rejected[3].Index != 5 || !strings.HasPrefix(res.Rejected[3].Reason, "kind:") {
		t.Fatalf("rejections %+v", res.Rejected)
	}

	for _, c := range []struct {
		who    caller
		body   string
		status int
	}{
		{caller{}, `{"records":[]}`, 401},
		{caller{role: authn.RoleTenantAdmin, tenant: tenant}, `{"records":[]}`, 403},
		{finance, `{"records":[]}`, 403},
		{dmn, `{"records":`, 400},
		{dmn, `{}`, 400},
		{dmn, `{"records":[` + strings.Repeat(`{},`, 1000) + `{}]}`, 400},
	} {
		w := do(t, h, c.who, "POST", "/v1/agent/usage", c.body)
		if w.Code != c.status || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%v %.40s: %d %s, want %d problem", c.who.role, c.body, w.Code, w.Header().Get("Content-Type"), c.status)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

type invoiceJSON struct {
	ID         uuid.UUID `json:"id"`
	TenantID   uuid.UUID `json:"tenant_id"`
	TotalCents int64     `json:"total_cents"`
	Lines      []struct {
		AmountCents int64 `json:"amount_cents"`
	} `json:"lines"`
}

func TestTenantIsolationAndInvoices(t *testing.T) {
	h, pool := newServerPool(t)
	a, b := uuid.New(), uuid.New()
	holdGPU(t, pool, a, "H100", march.Add(time.Hour), 2*time.Hour)
	holdGPU(t, pool, b, "H100", march.Add(time.Hour), 7*time.Hour)
	alice := caller{role: authn.RoleTenantMember, tenant: a}
	bob := caller{role: authn.RoleTenantAdmin, tenant: b}
	decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{
		record("a1", a, march.Add(time.Hour), 2*time.Hour), record("b1", b, march.Add(time.Hour), 7*time.Hour),
	}}), 200)

	// Prices: finance only.
	price := map[string]any{"kind": "gpu", "gpu_model": "H100", "tier": "dedicated", "unit_price_micros": 2_500_000, "effective_from": "2026-01-01T00:00:00Z"}
	if w := do(t, h, alice, "POST", "/v1/prices", price); w.Code != 403 {
		t.Fatalf("tenant added a price: %d", w.Code)
	}
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", price), 201)
	if w := do(t, h, finance, "POST", "/v1/prices", price); w.Code != 409 {
		t.Fatalf("same price twice: %d %s", w.Code, w.Body)
	}
	bad := map[string]any{"kind": "gpu", "gpu_model": "H100", "tier": "dedicated", "unit_price_micros": 1, "effective_from": "2026-01-01T00:30:00Z"}
	if w := do(t, h, finance, "POST", "/v1/prices", bad); w.Code != 400 || !strings.Contains(w.Body.String(), "effective_from") {
		t.Fatalf("price at half past: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, finance, "POST", "/v1/prices", `{"kind":"gpu","price":1}`); w.Code != 400 || !strings.Contains(w.Body.String(), "price") {
		t.Fatalf("unknown field: %d %s", w.Code, w.Body)
	}

	// Usage: each tenant sees its own only.
	type usage struct {
		Rows []struct {
			GPUHours string `json:"gpu_hours"`
		} `json:"rows"`
	}
	u := decode[usage](t, do(t, h, alice, "GET", "/v1/usage?from=2026-03&to=2026-04&granularity=month", nil), 200)
	if len(u.Rows) != 1 || u.Rows[0].GPUHours != "2.000000" {
		t.Fatalf("alice's usage %+v, want her 2 GPU-hours only", u)
	}
	if w := do(t, h, alice, "GET", "/v1/usage?tenant_id="+b.String(), nil); w.Code != 404 {
		t.Fatalf("alice asking for bob's usage: %d", w.Code)
	}

	// Closing: finance only; once.
	closeA := map[string]string{"tenant_id": a.String(), "period": "2026-03"}
	if w := do(t, h, alice, "POST", "/v1/periods/close", closeA); w.Code != 403 {
		t.Fatalf("tenant closed a period: %d", w.Code)
	}
	invA := decode[invoiceJSON](t, do(t, h, finance, "POST", "/v1/periods/close", closeA), 201)
	if invA.TotalCents != 500 || len(invA.Lines) != 1 || invA.Lines[0].AmountCents != 500 {
		t.Fatalf("invoice %+v, want 2 h x 2.50 = 500 cents", invA)
	}
	if w := do(t, h, finance, "POST", "/v1/periods/close", closeA); w.Code != 409 || !strings.Contains(w.Body.String(), "period-closed") {
		t.Fatalf("closing again: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, finance, "POST", "/v1/periods/close", map[string]string{"tenant_id": a.String(), "period": "2026-04"}); w.Code != 409 {
		t.Fatalf("closing April on April 10th: %d %s", w.Code, w.Body)
	}
	invB := decode[invoiceJSON](t, do(t, h, finance, "POST", "/v1/periods/close", map[string]string{"tenant_id": b.String(), "period": "2026-03"}), 201)

	// A late record for March: the closed invoice stays as it was.
	decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{
		record("a-late", a, march.Add(48*time.Hour), time.Hour)}}), 200)
	again := decode[invoiceJSON](t, do(t, h, alice, "GET", "/v1/invoices/"+invA.ID.String(), nil), 200)
	if again.TotalCents != 500 || len(again.Lines) != 1 {
		t.Fatalf("closed invoice changed after a late record: %+v", again)
	}

	// Invoices: own only; another's is not found.
	list := decode[struct{ Items []invoiceJSON }](t, do(t, h, alice, "GET", "/v1/invoices", nil), 200)
	if len(list.Items) != 1 || list.Items[0].ID != invA.ID {
		t.Fatalf("alice's invoices %+v", list.Items)
	}
	if w := do(t, h, alice, "GET", "/v1/invoices/"+invB.ID.String(), nil); w.Code != 404 {
		t.Fatalf("alice reading bob's invoice: %d", w.Code)
	}
	if w := do(t, h, bob, "GET", "/v1/invoices?tenant_id="+a.String(), nil); w.Code != 404 {
		t.Fatalf("bob listing alice's invoices: %d", w.Code)
	}
	all := decode[struct{ Items []invoiceJSON }](t, do(t, h, finance, "GET", "/v1/invoices", nil), 200)
	if len(all.Items) != 2 {
		t.Fatalf("finance sees %d invoices, want 2", len(all.Items))
	}
	if w := do(t, h, alice, "GET", "/v1/invoices/not-a-uuid", nil); w.Code != 400 {
		t.Fatalf("bad id: %d", w.Code)
	}
}

func TestReports(t *testing.T) {
	h := newServer(t)
	a, b := uuid.New(), uuid.New()
	shared := record("s", b, march.Add(26*time.Hour), 2*time.Hour)
	shared.Tier, shared.MemoryQuota = "shared", 10<<30
	decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{
		record("d", a, march.Add(time.Hour), 3*time.Hour), shared}}), 200)
	decode[map[string]any](t, do(t, h, finance, "POST", "/v1/prices", map[string]any{"kind": "gpu", "gpu_model": "H100", "tier": "dedicated",
		"unit_price_micros": 1_000_000, "effective_from": "2026-01-01T00:00:00Z"}), 201)

	if w := do(t, h, caller{role: authn.RoleTenantAdmin, tenant: a}, "GET", "/v1/reports/gpu-hours", nil); w.Code != 403 {
		t.Fatalf("tenant read a finance report: %d", w.Code)
	}
	type rep struct {
		Rows []struct {
			Bucket        string `json:"bucket"`
			Group         string `json:"group"`
			RevenueCents  int64  `json:"revenue_cents"`
			UnpricedGPUMs int64  `json:"unpriced_gpu_ms"`
		}
		Total struct {
			GPUMs int64 `json:"gpu_ms"`
		}
	}
	var r rep
	w := do(t, h, caller{role: authn.RoleOperator}, "GET", "/v1/reports/gpu-hours?from=2026-03-01&to=2026-04-01&group_by=tier&granularity=day", nil)
	raw := decode[map[string]any](t, w, 200)
	b2, _ := json.Marshal(raw)
	_ = json.Unmarshal(b2, &r)
	if len(r.Rows) != 2 || r.Rows[0].Bucket != "2026-03-01" || r.Rows[0].Group != "dedicated" || r.Rows[0].RevenueCents != 300 ||
		r.Rows[1].Bucket != "2026-03-02" || r.Rows[1].Group != "shared" || r.Rows[1].UnpricedGPUMs != 2*3_600_000 || r.Total.GPUMs != 5*3_600_000 {
		t.Fatalf("report %s", b2)
	}
	for _, how := range [][]string{{"?format=csv"}, {"", "Accept", "text/csv"}} {
		w := do(t, h, finance, "GET", "/v1/reports/gpu-hours"+how[0]+sep(how[0])+"from=2026-03&to=2026-04&group_by=tenant&granularity=month", nil, how[1:]...)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("csv %v: %d %s", how, w.Code, w.Header())
		}
		recs, err := csv.NewReader(w.Body).ReadAll()
		if err != nil || len(recs) != 3 || recs[0][1] != "tenant" {
			t.Fatalf("csv %v: %q %v", how, recs, err)
		}
	}
	for _, q := range []string{"group_by=region", "granularity=week", "from=yesterday", "from=2026-03-01T00:30:00Z", "format=xml"} {
		w := do(t, h, finance, "GET", "/v1/reports/gpu-hours?"+q, nil)
		field := strings.SplitN(q, "=", 2)[0]
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"field":"`+field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", q, w.Code, w.Body, field)
		}
	}
}

func sep(q string) string {
	if q == "" {
		return "?"
	}
	return "&"
}

// Every mounted route has an OpenAPI path item for its method, and nothing documented is missing.
func TestEveryRouteDocumented(t *testing.T) {
	r := gin.New()
	httpapi.New(nil, everyPlacement{}, nil).Mount(r.Group("/v1"))
	paths := httpapi.OpenAPIPaths()
	param := regexp.MustCompile(`:(\w+)`)
	n := 0
	for _, rt := range r.Routes() {
		p := param.ReplaceAllString(rt.Path, "{$1}")
		item, ok := paths[p].(map[string]any)
		if !ok {
			t.Errorf("%s %s: no OpenAPI path %s", rt.Method, rt.Path, p)
			continue
		}
		if _, ok := item[strings.ToLower(rt.Method)]; !ok {
			t.Errorf("%s %s: no %s operation", rt.Method, rt.Path, strings.ToLower(rt.Method))
		}
		n++
	}
	ops := 0
	for _, item := range paths {
		ops += len(item.(map[string]any))
	}
	if ops != n || n == 0 {
		t.Fatalf("%d documented operations, %d routes", ops, n)
	}
	if _, err := json.Marshal(paths); err != nil {
		t.Fatalf("paths do not marshal: %v", err)
	}
}

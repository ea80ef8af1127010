package sdk_test

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func micros(v int64) *int64 { return &v }

// apiErr asserts err is an APIError of status and problem type.
func apiErr(t *testing.T, what string, err error, status int, typ string) *sdk.APIError {
	t.Helper()
	ae, ok := sdk.AsAPIError(err)
	if !ok || ae.Status != status || (typ != "" && ae.Type != typ) {
		t.Fatalf("%s: got %v, want %d %s", what, err, status, typ)
	}
	return ae
}

// TestPrices: finance adds entries, everyone but daemons reads the book, bad entries name
// their field, an entry is never replaced.
func TestPrices(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	fin, a := e.Client(t, e.Finance), e.Client(t, e.A.AdminKey)
	p, err := fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: micros(2_500_000), EffectiveFrom: march})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == "" || p.Unit != "gpu-hour" || p.Currency != "USD" || !p.EffectiveFrom.Equal(march) {
		t.Fatalf("added %+v", p)
	}
	free, err := fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "vm", InstanceType: "cpu-small", UnitPriceMicros: micros(0), EffectiveFrom: march})
	if err != nil || free.UnitPriceMicros != 0 || free.Unit != "vm-hour" {
		t.Fatalf("a free vm price: %+v %v", free, err)
	}

	_, err = fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: micros(9), EffectiveFrom: march})
	apiErr(t, "same key and time", err, http.StatusConflict, "price-exists")
	for name, r := range map[string]sdk.AddPriceRequest{
		"kind":              {Kind: "tpu", UnitPriceMicros: micros(1), EffectiveFrom: march},
		"tier":              {Kind: "gpu", GPUModel: "H100", Tier: "premium", UnitPriceMicros: micros(1), EffectiveFrom: march},
		"unit_price_micros": {Kind: "gpu", GPUModel: "H100", Tier: "shared", EffectiveFrom: march},
		"effective_from":    {Kind: "gpu", GPUModel: "H100", Tier: "shared", UnitPriceMicros: micros(1), EffectiveFrom: march.Add(90 * time.Second)},
	} {
		_, err := fin.AddPrice(ctx, r)
		ae := apiErr(t, "bad "+name, err, http.StatusBadRequest, "")
		if !sdk.IsValidation(err) || len(ae.Fields) != 1 || ae.Fields[0].Field != name {
			t.Errorf("bad %s: fields %+v", name, ae.Fields)
		}
	}
	_, err = a.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "shared", UnitPriceMicros: micros(1), EffectiveFrom: march})
	if !sdk.IsForbidden(err) {
		t.Fatalf("tenant adds a price: %v", err)
	}

	// Refusals left the book as it was: the two entries, for every reader.
	for _, c := range []*sdk.Client{a, fin, e.OperatorClient} {
		book, err := sdk.Collect(c.Prices(ctx))
		if err != nil || len(book) != 2 || !slices.ContainsFunc(book, func(q sdk.Price) bool { return reflect.DeepEqual(q, p) }) {
			t.Fatalf("price book: %+v %v", book, err)
		}
	}
	_, err = e.Meter(t, "gs-prices").Client.ListPrices(ctx)
	if !sdk.IsForbidden(err) {
		t.Fatalf("a daemon reads prices: %v", err)
	}
}

// billed is an apiserver where tenant A used 90 dedicated GPU-minutes in March 2026 and tenant B
// 30, at 2.50 per GPU-hour, and A's March is closed.
type billed struct {
	e           *sdktest.Env
	meter       *sdktest.Meter
	fin, a, b   *sdk.Client
	invA        sdk.Invoice
	dedicatedAt time.Time
}

func newBilled(t *testing.T) *billed {
	ctx := ctxT(t)
	e := sdktest.New(t)
	s := &billed{e: e, meter: e.Meter(t, "gs-billing"), fin: e.Client(t, e.Finance), a: e.Client(t, e.A.AdminKey), b: e.Client(t, e.B.AdminKey)}
	if _, err := s.fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: micros(2_500_000), EffectiveFrom: march}); err != nil {
		t.Fatal(err)
	}
	s.dedicatedAt = march.Add(9*24*time.Hour + 8*time.Hour)
	s.meter.GPU(t, e.A.ID, "H100", "dedicated", s.dedicatedAt, time.Hour)
	s.meter.GPU(t, e.A.ID, "H100", "dedicated", s.dedicatedAt.Add(2*time.Hour), 30*time.Minute)
	s.meter.GPU(t, e.B.ID, "H100", "dedicated", s.dedicatedAt, 30*time.Minute)
	var err error
	if s.invA, err = s.fin.ClosePeriod(ctx, e.A.ID, "2026-03"); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClosePeriodAndInvoices(t *testing.T) {
	ctx := ctxT(t)
	s := newBilled(t)
	e := s.e
	if s.invA.TenantID != e.A.ID || s.invA.Period != "2026-03" || s.invA.Status != "closed" || s.invA.TotalCents != 375 ||
		s.invA.Total != "3.75" || len(s.invA.Lines) != 1 || s.invA.Lines[0].QuantityMs != int64(90*time.Minute/time.Millisecond) {
		t.Fatalf("A's March invoice %+v", s.invA)
	}
	// Refusals: a closed month, a month not over, a malformed one, a tenant's key, usage with no price.
	_, err := s.fin.ClosePeriod(ctx, e.A.ID, "2026-03")
	apiErr(t, "close twice", err, http.StatusConflict, "period-closed")
	_, err = s.fin.ClosePeriod(ctx, e.A.ID, "2099-01")
	apiErr(t, "close the future", err, http.StatusConflict, "period-not-ended")
	_, err = s.fin.ClosePeriod(ctx, e.A.ID, "March")
	if ae := apiErr(t, "close March", err, http.StatusBadRequest, ""); ae.Fields[0].Field != "period" {
		t.Fatalf("fields %+v", ae.Fields)
	}
	_, err = s.fin.ClosePeriod(ctx, "not-a-tenant", "2026-03")
	if ae := apiErr(t, "close a bad tenant", err, http.StatusBadRequest, ""); ae.Fields[0].Field != "tenant_id" {
		t.Fatalf("fields %+v", ae.Fields)
	}
	_, err = s.b.ClosePeriod(ctx, e.B.ID, "2026-03")
	apiErr(t, "tenant closes", err, http.StatusForbidden, "forbidden")
	_, err = e.OperatorClient.ClosePeriod(ctx, e.B.ID, "2026-03") // operators read billing; finance runs it
	apiErr(t, "operator closes", err, http.StatusForbidden, "forbidden")
	_, err = e.OperatorClient.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "A100", Tier: "shared", UnitPriceMicros: micros(1), EffectiveFrom: march})
	apiErr(t, "operator adds a price", err, http.StatusForbidden, "forbidden")
	s.meter.GPU(t, e.B.ID, "H100", "shared", march.AddDate(0, 1, 3), time.Hour)
	_, err = s.fin.ClosePeriod(ctx, e.B.ID, "2026-04")
	if ae := apiErr(t, "unpriced", err, http.StatusConflict, "usage-unpriced"); !strings.Contains(ae.Detail, "shared") {
		t.Fatalf("unpriced detail %q", ae.Detail)
	}
	invB, err := s.fin.ClosePeriod(ctx, e.B.ID, "2026-03")
	if err != nil || invB.TotalCents != 125 {
		t.Fatalf("B's March: %+v %v", invB, err)
	}

	// Finance and operators see both; filtered by tenant, one.
	for _, c := range []*sdk.Client{s.fin, e.OperatorClient} {
		all, err := sdk.Collect(c.Invoices(ctx, ""))
		if err != nil || len(all) != 2 {
			t.Fatalf("all invoices: %+v %v", all, err)
		}
		only, err := sdk.Collect(c.Invoices(ctx, e.B.ID))
		if err != nil || len(only) != 1 || only[0].ID != invB.ID || only[0].Lines != nil {
			t.Fatalf("B's invoices: %+v %v", only, err)
		}
		got, err := c.GetInvoice(ctx, s.invA.ID)
		if err != nil || got.ID != s.invA.ID || len(got.Lines) != 1 {
			t.Fatalf("get A's invoice: %+v %v", got, err)
		}
	}
	page, err := s.fin.ListInvoices(ctx, sdk.InvoiceListOptions{Limit: 1})
	if err != nil || len(page.Items) != 1 || page.NextCursor == "" {
		t.Fatalf("limit 1: %+v %v", page, err)
	}
	if next, err := s.fin.ListInvoices(ctx, sdk.InvoiceListOptions{Limit: 1, Cursor: page.NextCursor}); err != nil ||
		len(next.Items) != 1 || next.Items[0].ID == page.Items[0].ID {
		t.Fatalf("the second page: %+v %v", next, err)
	}
	if _, err := s.fin.ListInvoices(ctx, sdk.InvoiceListOptions{Limit: sdk.MaxInvoices + 1}); err == nil || sdk.IsValidation(err) {
		t.Fatalf("a limit over the most is the SDK's error, before any request: %v", err)
	}
	raw, err := s.a.GetInvoiceCSV(ctx, s.invA.ID)
	rows, perr := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil || perr != nil || len(rows) != 2 || rows[1][0] != s.invA.ID || rows[1][14] != "375" {
		t.Fatalf("A's invoice as CSV: %q %v %v", rows, err, perr)
	}
	if _, err := s.b.GetInvoiceCSV(ctx, s.invA.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B reads A's invoice as CSV: %v", err)
	}
	_, err = s.fin.GetInvoice(ctx, "nope")
	apiErr(t, "malformed id", err, http.StatusBadRequest, "")
	_, err = s.fin.GetInvoice(ctx, "00000000-0000-4000-8000-000000000000")
	apiErr(t, "unknown id", err, http.StatusNotFound, "")
}

// TestBillingTenantIsolation: a tenant's key sees its own usage and invoices only; another
// tenant's are not found, never forbidden (their existence is not disclosed).
func TestBillingTenantIsolation(t *testing.T) {
	ctx := ctxT(t)
	s := newBilled(t)
	e := s.e
	invB, err := s.fin.ClosePeriod(ctx, e.B.ID, "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	member := e.Client(t, s.memberKey(t))
	for _, c := range []*sdk.Client{s.a, member} {
		list, err := sdk.Collect(c.Invoices(ctx, ""))
		if err != nil || len(list) != 1 || list[0].ID != s.invA.ID {
			t.Fatalf("A's invoices: %+v %v", list, err)
		}
		if _, err := c.GetInvoice(ctx, invB.ID); !sdk.IsNotFound(err) {
			t.Fatalf("A reads B's invoice: %v", err)
		}
		if _, err := sdk.Collect(c.Invoices(ctx, e.B.ID)); !sdk.IsNotFound(err) {
			t.Fatalf("A lists B's invoices: %v", err)
		}
		u, err := c.Usage(ctx, sdk.UsageQuery{From: march, To: march.AddDate(0, 1, 0), Granularity: "month"})
		if err != nil || u.TenantID != e.A.ID || len(u.Rows) != 1 || u.Rows[0].GPUMs != int64(90*time.Minute/time.Millisecond) {
			t.Fatalf("A's usage: %+v %v", u, err)
		}
		if _, err := c.Usage(ctx, sdk.UsageQuery{TenantID: e.B.ID, From: march}); !sdk.IsNotFound(err) {
			t.Fatalf("A reads B's usage: %v", err)
		}
	}
	own, err := s.b.Usage(ctx, sdk.UsageQuery{TenantID: e.B.ID, From: march, To: march.AddDate(0, 1, 0)})
	if err != nil || len(own.Rows) != 1 || own.Rows[0].GPUMs != int64(30*time.Minute/time.Millisecond) || own.Rows[0].Bucket != "2026-03-10" {
		t.Fatalf("B's own usage by day: %+v %v", own, err)
	}
}

// memberKey makes a tenant-member of A and returns its key.
func (s *billed) memberKey(t *testing.T) string {
	ctx := ctxT(t)
	u, err := s.a.CreateUser(ctx, sdk.CreateUserRequest{Email: "member@a.example", Role: "tenant-member", TenantID: s.e.A.ID})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.a.CreateAPIKey(ctx, u.ID, "m")
	if err != nil {
		t.Fatal(err)
	}
	return k.Secret
}

func TestUsage(t *testing.T) {
	ctx := ctxT(t)
	s := newBilled(t)
	e := s.e
	for _, c := range []*sdk.Client{s.fin, e.OperatorClient} {
		u, err := c.Usage(ctx, sdk.UsageQuery{TenantID: e.A.ID, From: march, To: march.AddDate(0, 1, 0), Granularity: "day"})
		if err != nil || len(u.Rows) != 1 || u.Rows[0].Bucket != "2026-03-10" || u.Rows[0].GPUHours != "1.500000" || u.Rows[0].Records != 2 {
			t.Fatalf("A's usage for a platform role: %+v %v", u, err)
		}
		_, err = c.Usage(ctx, sdk.UsageQuery{From: march})
		if ae := apiErr(t, "platform usage without a tenant", err, http.StatusBadRequest, ""); ae.Fields[0].Field != "tenant_id" {
			t.Fatalf("fields %+v", ae.Fields)
		}
	}
	_, err := s.a.Usage(ctx, sdk.UsageQuery{Granularity: "week"})
	if ae := apiErr(t, "granularity week", err, http.StatusBadRequest, ""); ae.Fields[0].Field != "granularity" {
		t.Fatalf("fields %+v", ae.Fields)
	}
	// This month (the default range) has none of March's usage.
	u, err := s.a.Usage(ctx, sdk.UsageQuery{})
	if err != nil || len(u.Rows) != 0 || u.From.Before(march.AddDate(0, 2, 0)) {
		t.Fatalf("default range: %+v %v", u, err)
	}
	if _, err := s.meter.Client.Usage(ctx, sdk.UsageQuery{TenantID: e.A.ID}); !sdk.IsForbidden(err) {
		t.Fatalf("a daemon reads usage: %v", err)
	}
}

// TestClosedInvoiceIsImmutable: late usage for a closed month leaves its invoice as it was; it is
// utilisation, so the next month's invoice charges nothing for it either.
func TestClosedInvoiceIsImmutable(t *testing.T) {
	ctx := ctxT(t)
	s := newBilled(t)
	e := s.e
	before, err := s.a.GetInvoice(ctx, s.invA.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.meter.GPU(t, e.A.ID, "H100", "dedicated", s.dedicatedAt.Add(5*time.Hour), 2*time.Hour) // late: March is closed
	after, err := s.a.GetInvoice(ctx, s.invA.ID)
	if err != nil || !reflect.DeepEqual(before, after) {
		t.Fatalf("closed invoice changed:\nbefore %+v\nafter  %+v (%v)", before, after, err)
	}
	if _, err := s.fin.ClosePeriod(ctx, e.A.ID, "2026-03"); !sdk.IsConflict(err) {
		t.Fatalf("re-close: %v", err)
	}
	april, err := s.fin.ClosePeriod(ctx, e.A.ID, "2026-04")
	if err != nil || april.TotalCents != 0 || len(april.Lines) != 0 {
		t.Fatalf("April with March's late usage: %+v %v", april, err)
	}
	list, err := sdk.Collect(s.a.Invoices(ctx, ""))
	if err != nil || len(list) != 2 || list[0].Period != "2026-04" || list[1].TotalCents != 375 {
		t.Fatalf("A's invoices, newest first: %+v %v", list, err)
	}
}

// TestRetriedBillingCreates: a price add or a period close whose answer was lost is retried
// with the same Idempotency-Key and answered from the first, not refused as a duplicate.
func TestRetriedBillingCreates(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	m := e.Meter(t, "gs-retry")
	m.GPU(t, e.A.ID, "H100", "dedicated", march.Add(time.Hour), time.Hour)
	f := &flaky{method: http.MethodPost}
	fin, err := sdk.New(e.URL, e.Finance, sdk.Options{HTTPClient: &http.Client{Transport: f},
		Retry: sdk.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: micros(1_000_000), EffectiveFrom: march})
	if err != nil || p.UnitPriceMicros != 1_000_000 {
		t.Fatalf("retried price add: %+v %v", p, err)
	}
	if len(f.keys) != 2 || f.keys[0] == "" || f.keys[0] != f.keys[1] {
		t.Fatalf("idempotency keys over the attempts: %q", f.keys)
	}
	f.tripped.Store(false)
	f.keys = nil
	inv, err := fin.ClosePeriod(ctx, e.A.ID, "2026-03")
	if err != nil || inv.TotalCents != 100 || len(f.keys) != 2 || f.keys[0] != f.keys[1] {
		t.Fatalf("retried close: %+v %v (keys %q)", inv, err, f.keys)
	}
	book, err := sdk.Collect(fin.Prices(ctx))
	if err != nil || len(book) != 1 {
		t.Fatalf("book after a retried add: %+v %v", book, err)
	}
}

// TestPeriods: months with usage are open (ended, so closable) until finance closes them; a
// tenant sees its own months only.
func TestPeriods(t *testing.T) {
	ctx := ctxT(t)
	s := newBilled(t)
	e := s.e
	all, err := sdk.Collect(s.fin.Periods(ctx, sdk.PeriodFilter{}))
	if err != nil || len(all) != 2 {
		t.Fatalf("periods: %+v %v", all, err)
	}
	for _, p := range all {
		switch p.TenantID {
		case e.A.ID:
			if p.Status != sdk.PeriodClosed || p.InvoiceID != s.invA.ID || p.TotalCents == nil || *p.TotalCents != 375 || p.ClosedAt == nil {
				t.Errorf("A's March %+v", p)
			}
		case e.B.ID:
			if p.Status != sdk.PeriodOpen || !p.Ended || p.InvoiceID != "" || p.Period != "2026-03" {
				t.Errorf("B's March %+v", p)
			}
		default:
			t.Errorf("a period of no tenant here: %+v", p)
		}
	}
	toClose, err := sdk.Collect(s.fin.Periods(ctx, sdk.PeriodFilter{Status: sdk.PeriodOpen}))
	if err != nil || len(toClose) != 1 || toClose[0].TenantID != e.B.ID {
		t.Fatalf("open periods: %+v %v", toClose, err)
	}
	if _, err := s.fin.ClosePeriod(ctx, toClose[0].TenantID, toClose[0].Period); err != nil {
		t.Fatal(err)
	}
	if left, err := sdk.Collect(s.fin.Periods(ctx, sdk.PeriodFilter{Status: sdk.PeriodOpen})); err != nil || len(left) != 0 {
		t.Fatalf("open after closing: %+v %v", left, err)
	}
	own, err := sdk.Collect(s.a.Periods(ctx, sdk.PeriodFilter{}))
	if err != nil || len(own) != 1 || own[0].TenantID != e.A.ID {
		t.Fatalf("A's periods: %+v %v", own, err)
	}
	if _, err := sdk.Collect(s.a.Periods(ctx, sdk.PeriodFilter{TenantID: e.B.ID})); !sdk.IsNotFound(err) {
		t.Fatalf("A lists B's periods: %v", err)
	}
	_, err = s.fin.ListPeriods(ctx, sdk.PeriodFilter{Status: "draft"})
	if ae := apiErr(t, "status draft", err, http.StatusBadRequest, ""); ae.Fields[0].Field != "status" {
		t.Fatalf("fields %+v", ae.Fields)
	}
	if _, err := s.fin.ListPeriods(ctx, sdk.PeriodFilter{Limit: -1}); err == nil || sdk.IsValidation(err) {
		t.Fatalf("a negative limit is the SDK's error: %v", err)
	}
}

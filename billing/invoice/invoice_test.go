package invoice_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	april = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	clock = func() time.Time { return time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC) }
)

type env struct {
	pool *pgxpool.Pool
	in   *ingest.Ingester
	inv  *invoice.Service
	book *rating.Book
}

func newEnv(t *testing.T) env {
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	e := env{pool: pool, in: ingest.New(pool, nil), inv: invoice.New(pool), book: rating.NewBook(pool)}
	e.in.SetClock(clock)
	e.inv.SetClock(clock)
	return e
}

func (e env) price(t *testing.T, p rating.Price) {
	t.Helper()
	if _, err := e.book.Add(context.Background(), p); err != nil {
		t.Fatalf("add price %+v: %v", p, err)
	}
}

func (e env) ingest(t *testing.T, recs ...api.UsageRecord) api.UsageBatchResult {
	t.Helper()
	res, err := e.in.Ingest(context.Background(), api.UsageBatch{Records: recs}, nil)
	if err != nil || len(res.Rejected) > 0 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	return res
}

func standardPrices(t *testing.T, e env) {
	e.price(t, rating.Price{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 4_000_000, EffectiveFrom: march.AddDate(-1, 0, 0)})
	e.price(t, rating.Price{Kind: "gpu", GPUModel: "H100", Tier: "shared", UnitPriceMicros: 55_000, EffectiveFrom: march.AddDate(-1, 0, 0)})
	e.price(t, rating.Price{Kind: "vm", InstanceType: "g1.large", UnitPriceMicros: 333_333, EffectiveFrom: march.AddDate(-1, 0, 0)})
	e.price(t, rating.Price{Kind: "storage", UnitPriceMicros: 100, EffectiveFrom: march.AddDate(-1, 0, 0)})
}

func (e env) hold(t *testing.T, a ...billingtest.Alloc) {
	t.Helper()
	for _, x := range a {
		billingtest.Hold(t, e.pool, x)
	}
}

func TestCloseRatesAndReconciles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	// From March 16th the dedicated H100 costs 5.00.
	e.price(t, rating.Price{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 5_000_000, EffectiveFrom: march.AddDate(0, 0, 15)})
	tenant, other := uuid.New(), uuid.New()
	shared := billingtest.Alloc{Tenant: tenant, Kind: "gpu", Tier: "shared", GPUModel: "H100", InstType: "s1",
		Quantity: 20 << 10, Start: march.Add(time.Hour), End: march.Add(90 * time.Minute)} // 20 GiB x 0.5 h x 0.055 = 0.55
	e.hold(t,
		billingtest.Dedicated(tenant, 1, march.Add(time.Hour), 90*time.Minute), // 1.5 h x 4.00 = 6.00
		billingtest.Dedicated(tenant, 1, march.AddDate(0, 0, 20), time.Hour),   // 1 h x 5.00 = 5.00
		// Across the price change: 0.5 h x 4.00 + 0.5 h x 5.00, by the second.
		billingtest.Dedicated(tenant, 1, march.AddDate(0, 0, 15).Add(-30*time.Minute), time.Hour),
		billingtest.Alloc{Tenant: tenant, Kind: "vm", Tier: "dedicated", GPUModel: "H100", InstType: "g1.large", Quantity: 1,
			Start: march.Add(2 * time.Hour), End: march.Add(2*time.Hour + 10*time.Minute)}, // 1/6 h x 0.333333 = 0.0555555 -> 0.06
		shared,
		// A 100 GiB disk for 10 days: 24,000 GiB-hours x 0.0001 = 2.40.
		billingtest.Alloc{Tenant: tenant, Kind: "storage", Quantity: 100 << 10, Start: march, End: march.AddDate(0, 0, 10)},
		billingtest.Dedicated(other, 1, march.Add(time.Hour), 10*time.Hour), // another tenant's
	)
	// Still held when the month ends (never released): billed up to the month's end only.
	open := billingtest.Dedicated(other, 2, april.Add(-30*time.Minute), 0)
	open.End = time.Time{}
	e.hold(t, open)
	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	got := map[string]int64{}
	for _, l := range inv.Lines {
		sum += l.AmountCents
		got[l.Kind+"/"+l.Tier+"/"+l.GPUModel+l.InstanceType+"/"+rating.FormatMicros(l.UnitPriceMicros)] = l.AmountCents
	}
	want := map[string]int64{
		"gpu/dedicated/H100/4.000000": 800, "gpu/dedicated/H100/5.000000": 750,
		"gpu/shared/H100/0.055000": 55, "vm//g1.large/0.333333": 6, "storage///0.000100": 240,
	}
	if len(got) != len(want) {
		t.Fatalf("lines %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("line %s = %d cents, want %d", k, got[k], v)
		}
	}
	if inv.TotalCents != sum || sum != 1851 || inv.Total != "18.51" {
		t.Fatalf("total %d (%s), lines sum %d, want 1851", inv.TotalCents, inv.Total, sum)
	}
	// Held past the month's end: March pays its own half hour only.
	o, err := e.inv.Close(ctx, other, march)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Lines) != 2 || o.Lines[1].QuantityMs != 2*1_800_000 || o.TotalCents != 4000+500 {
		t.Fatalf("other tenant's march %+v, want 10 h x 4.00 + 2 GPUs x 0.5 h x 5.00", o)
	}
	// Read back: the same invoice, same lines.
	back, err := e.inv.Get(ctx, inv.ID, &tenant)
	if err != nil {
		t.Fatal(err)
	}
	if back.TotalCents != inv.TotalCents || len(back.Lines) != len(inv.Lines) || back.Lines[0].Description != inv.Lines[0].Description {
		t.Fatalf("read back %+v, closed %+v", back, inv)
	}
	for i, l := range back.Lines {
		if l.Quantity != inv.Lines[i].Quantity {
			t.Errorf("line %d quantity read back %s, closed %s", i, l.Quantity, inv.Lines[i].Quantity)
		}
	}
	// Another tenant cannot read it.
	if _, err := e.inv.Get(ctx, inv.ID, &other); !errors.Is(err, invoice.ErrNotFound) {
		t.Fatalf("other tenant Get: %v, want ErrNotFound", err)
	}
	if _, err := e.inv.Close(ctx, tenant, march); !errors.Is(err, invoice.ErrAlreadyClosed) {
		t.Fatalf("second close: %v, want ErrAlreadyClosed", err)
	}
}

func TestCloseRefusesOpenPeriodAndUnpricedUsage(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tenant := uuid.New()
	if _, err := e.inv.Close(ctx, tenant, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatalf("May has ended by the test clock's June 1st: %v", err)
	}
	if _, err := e.inv.Close(ctx, tenant, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, invoice.ErrNotEnded) {
		t.Fatalf("closing June: %v, want ErrNotEnded", err)
	}
	e.hold(t, billingtest.Dedicated(tenant, 1, march, time.Hour))
	_, err := e.inv.Close(ctx, tenant, march)
	var unpriced *rating.UnpricedError
	if !errors.As(err, &unpriced) || !strings.Contains(err.Error(), "gpu H100 dedicated") {
		t.Fatalf("close with unpriced usage: %v, want UnpricedError naming gpu H100 dedicated", err)
	}
	if n := len(mustList(t, e, &tenant)); n != 1 {
		t.Fatalf("%d invoices, want only May's", n)
	}
}

func mustList(t *testing.T, e env, tenant *uuid.UUID) []invoice.Invoice {
	t.Helper()
	l, err := e.inv.List(context.Background(), tenant, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Usage records (GPU sessions, VM runs) are utilisation: a month with records and nothing held
// has nothing to pay, and a late record still books into the next open month's utilisation.
func TestUsageRecordsAreNotCharged(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	tenant := uuid.New()
	e.hold(t, billingtest.Dedicated(tenant, 1, march.AddDate(0, 0, 3), time.Hour))
	e.ingest(t, billingtest.GPU("early", tenant, march.AddDate(0, 0, 3), time.Hour),
		billingtest.VM("vm", tenant, march.AddDate(0, 0, 3), time.Hour))
	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	if inv.TotalCents != 400 || len(inv.Lines) != 1 {
		t.Fatalf("march %+v, want the held GPU-hour only (400)", inv)
	}
	e.ingest(t, billingtest.GPU("late", tenant, march.AddDate(0, 0, 10), 30*time.Minute))
	var booked time.Time
	var adj bool
	if err := e.pool.QueryRow(ctx, `SELECT booked_period, adjustment FROM billing_usage_records WHERE id = 'late'`).Scan(&booked, &adj); err != nil {
		t.Fatal(err)
	}
	if !booked.Equal(april) || !adj {
		t.Fatalf("late record booked %s adjustment=%v, want April adjustment", booked, adj)
	}
	apr, err := e.inv.Close(ctx, tenant, april)
	if err != nil {
		t.Fatal(err)
	}
	if apr.TotalCents != 0 || len(apr.Lines) != 0 {
		t.Fatalf("april %+v: charged for utilisation", apr)
	}
}

// Closed invoices refuse every change made directly in SQL, not only through the service.
func TestClosedInvoiceImmutableInDatabase(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	tenant := uuid.New()
	e.hold(t, billingtest.Dedicated(tenant, 1, march, time.Hour))
	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE billing_invoices SET total_cents = 1 WHERE id = $1`,
		`UPDATE billing_invoices SET status = 'draft' WHERE id = $1`,
		`DELETE FROM billing_invoices WHERE id = $1`,
		`UPDATE billing_invoice_lines SET amount_cents = 1 WHERE invoice_id = $1`,
		`DELETE FROM billing_invoice_lines WHERE invoice_id = $1`,
		`INSERT INTO billing_invoice_lines SELECT invoice_id, 99, description, kind, tier, gpu_model, instance_type,
		    usage_period, adjustment, quantity_ms, unit, unit_price_micros, price_id, amount_cents
		 FROM billing_invoice_lines WHERE invoice_id = $1`,
	} {
		if _, err := e.pool.Exec(ctx, stmt, inv.ID); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s: err %v, want refusal", stmt, err)
		}
	}
	for _, stmt := range []string{`TRUNCATE billing_invoice_lines`, `TRUNCATE billing_invoices CASCADE`} {
		if _, err := e.pool.Exec(ctx, stmt); err == nil {
			t.Errorf("%s succeeded", stmt)
		}
	}
	again, err := e.inv.Get(ctx, inv.ID, nil)
	if err != nil || again.TotalCents != 400 || len(again.Lines) != 1 || again.Lines[0].AmountCents != 400 {
		t.Fatalf("invoice after attempts: %+v %v", again, err)
	}
}

// A total that does not equal its lines cannot be closed, even by hand.
func TestTotalMustReconcile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var id uuid.UUID
	if err := e.pool.QueryRow(ctx, `INSERT INTO billing_invoices (tenant_id, period) VALUES ($1, $2) RETURNING id`, uuid.New(), march).Scan(&id); err != nil {
		t.Fatal(err)
	}
	_, err := e.pool.Exec(ctx, `UPDATE billing_invoices SET status = 'closed', total_cents = 5 WHERE id = $1`, id)
	if err == nil || !strings.Contains(err.Error(), "does not equal the sum of its lines") {
		t.Fatalf("closing a mismatched invoice: %v", err)
	}
}

package report_test

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// expected recomputes a report from raw records in Go: split each interval at bucket
// boundaries, sum GPU-ms per bucket and group, and price each hour exactly with big rationals.
type expected struct {
	ms     map[[2]string]int64
	micros map[[2]string]*big.Rat
}

func compute(recs []api.UsageRecord, groupBy, granularity string, price func(r api.UsageRecord, hour time.Time) (int64, int64)) expected {
	e := expected{ms: map[[2]string]int64{}, micros: map[[2]string]*big.Rat{}}
	for _, r := range recs {
		for h := r.Start.Truncate(time.Hour); h.Before(r.End); h = h.Add(time.Hour) {
			lo, hi := maxT(r.Start, h), minT(r.End, h.Add(time.Hour))
			ms := hi.Sub(lo).Milliseconds()
			bucket := h.Format("2006-01-02")
			if granularity == "month" {
				bucket = h.Format("2006-01")
			}
			group := map[string]string{"tier": r.Tier, "gpu_model": r.GPUModel, "tenant": r.TenantID}[groupBy]
			k := [2]string{bucket, group}
			e.ms[k] += int64(r.GPUCount) * ms
			qty, unitMs := int64(r.GPUCount)*ms, int64(3_600_000)
			if r.Tier == "shared" {
				qty, unitMs = int64(r.GPUCount)*int64(r.MemoryQuota>>20)*ms, 1024*3_600_000
			}
			p, _ := price(r, h)
			if e.micros[k] == nil {
				e.micros[k] = new(big.Rat)
			}
			e.micros[k].Add(e.micros[k], new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(qty), big.NewInt(p)), big.NewInt(unitMs)))
		}
	}
	return e
}

func cents(micros *big.Rat) int64 {
	c := new(big.Rat).Quo(micros, big.NewRat(10000, 1))
	// Round half away from zero (amounts are never negative here).
	n := new(big.Int).Quo(new(big.Int).Add(new(big.Int).Mul(c.Num(), big.NewInt(2)), c.Denom()), new(big.Int).Mul(c.Denom(), big.NewInt(2)))
	return n.Int64()
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// The report's totals equal the sums over the raw records, for random data and every grouping.
func TestReportMatchesRawRecords(t *testing.T) {
	for _, seed := range []uint64{20260301, 7, 4242} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkReportMatchesRaw(t, seed) })
	}
}

func checkReportMatchesRaw(t *testing.T, seed uint64) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return march.AddDate(0, 2, 0) })
	book := rating.NewBook(pool)
	mid := march.AddDate(0, 0, 13).Add(7 * time.Hour)
	prices := map[string][2]int64{} // key -> price before mid, from mid
	for i, m := range billingtest.Models {
		for j, tier := range billingtest.Tiers {
			before, after := int64(1_000_000*(i+1)+j*7_777), int64(1_500_000*(i+1)+j*3_333)
			if tier == "shared" {
				before, after = before/50, after/50
			}
			prices[m+"/"+tier] = [2]int64{before, after}
			for k, from := range []time.Time{march.AddDate(-1, 0, 0), mid} {
				if _, err := book.Add(ctx, rating.Price{Kind: "gpu", GPUModel: m, Tier: tier,
					UnitPriceMicros: prices[m+"/"+tier][k], EffectiveFrom: from}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	price := func(r api.UsageRecord, h time.Time) (int64, int64) {
		p := prices[r.GPUModel+"/"+r.Tier]
		if h.Before(mid) {
			return p[0], 0
		}
		return p[1], 0
	}

	g := billingtest.NewGenerator(seed, 4, march, "prop")
	var recs []api.UsageRecord
	for b := 0; b < 5; b++ {
		batch := g.Batch(1000)
		// Replay part of the previous batch too: duplicates must not count.
		if len(recs) > 0 {
			batch.Records = append(batch.Records[:900], recs[len(recs)-100:]...)
		}
		res, err := in.Ingest(ctx, batch, nil)
		if err != nil || len(res.Rejected) > 0 {
			t.Fatalf("seed %d batch %d: %+v %v", seed, b, res, err)
		}
		recs = append(recs, batch.Records[:min(len(batch.Records), 900+100*boolInt(b == 0))]...)
	}
	rep := report.New(pool)
	for _, groupBy := range []string{"tier", "gpu_model", "tenant"} {
		for _, gran := range []string{"day", "month"} {
			got, err := rep.GPUHours(ctx, report.Query{From: march, To: march.AddDate(0, 1, 0), GroupBy: groupBy, Granularity: gran})
			if err != nil {
				t.Fatal(err)
			}
			want := compute(recs, groupBy, gran, price)
			if len(got.Rows) != len(want.ms) {
				t.Fatalf("%s/%s: %d rows, want %d", groupBy, gran, len(got.Rows), len(want.ms))
			}
			var total int64
			for _, row := range got.Rows {
				k := [2]string{row.Bucket, row.Group}
				if row.GPUMs != want.ms[k] {
					t.Errorf("seed %d %s/%s %v: %d GPU-ms, want %d", seed, groupBy, gran, k, row.GPUMs, want.ms[k])
				}
				if c := cents(want.micros[k]); row.RevenueCents != c {
					t.Errorf("seed %d %s/%s %v: revenue %d cents, want %d", seed, groupBy, gran, k, row.RevenueCents, c)
				}
				if row.UnpricedGPUMs != 0 {
					t.Errorf("%v: unpriced usage %d", k, row.UnpricedGPUMs)
				}
				total += want.ms[k]
			}
			if got.Total.GPUMs != total || got.Total.Records != int64(len(recs)) {
				t.Fatalf("%s/%s total %d GPU-ms %d records, want %d and %d", groupBy, gran, got.Total.GPUMs, got.Total.Records, total, len(recs))
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestReportRefusesBadQuery(t *testing.T) {
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	rep := report.New(pool)
	for _, c := range []struct {
		q     report.Query
		field string
	}{
		{report.Query{From: march, To: march.Add(time.Hour), GroupBy: "region", Granularity: "day"}, "group_by"},
		{report.Query{From: march, To: march.Add(time.Hour), GroupBy: "tier", Granularity: "week"}, "granularity"},
		{report.Query{To: march, GroupBy: "tier", Granularity: "day"}, "from"},
		{report.Query{From: march.Add(time.Minute), To: march.Add(time.Hour), GroupBy: "tier", Granularity: "day"}, "from"},
		{report.Query{From: march, To: march, GroupBy: "tier", Granularity: "day"}, "to"},
	} {
		_, err := rep.GPUHours(context.Background(), c.q)
		var fe *report.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: err %v, want one about %s", c.q, err, c.field)
		}
	}
}

func TestTenantUsageIsolated(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return march.AddDate(0, 2, 0) })
	a, b := uuid.New(), uuid.New()
	if _, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{
		billingtest.GPU("a1", a, march, time.Hour), billingtest.VM("a2", a, march, 30*time.Minute),
		billingtest.GPU("b1", b, march, 5*time.Hour),
	}}, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := report.New(pool).TenantUsage(ctx, a, march, march.AddDate(0, 1, 0), "month")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].GPUHours != "1.000000" || rows[1].VMHours != "0.500000" {
		t.Fatalf("tenant a usage %+v, want its own 1 GPU-hour and 0.5 VM-hour only", rows)
	}
}

func TestCSV(t *testing.T) {
	var b strings.Builder
	rep := report.Report{GroupBy: "gpu_model", Currency: "USD", Rows: []report.Row{
		{Bucket: "2026-03", Group: "=HYPERLINK(1)", GPUMs: 5_400_000, GPUHours: report.Hours(5_400_000), RevenueCents: 123, Revenue: "1.23"},
	}}
	if err := report.WriteCSV(&b, rep); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0][1] != "gpu_model" || recs[1][1] != "'=HYPERLINK(1)" || recs[1][3] != "1.500000" || recs[1][5] != strconv.Itoa(123) {
		t.Fatalf("csv %q", recs)
	}
}

func TestHours(t *testing.T) {
	for ms, want := range map[int64]string{0: "0.000000", 3_600_000: "1.000000", 1: "0.000000", 2: "0.000001", 3_599_999: "1.000000", 5_400_000: "1.500000"} {
		if got := report.Hours(ms); got != want {
			t.Errorf("Hours(%d) = %s, want %s", ms, got, want)
		}
	}
}

// Months and days are UTC whatever the session's time zone: a record early on March 1st UTC is
// March usage even on a connection set to New York, where it is still February.
func TestUTCWhateverTheSessionTimeZone(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "America/New_York"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return march.AddDate(0, 2, 0) })
	tenant := uuid.New()
	early := time.Date(2026, 3, 1, 1, 30, 0, 0, time.UTC)
	if _, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{billingtest.GPU("tz", tenant, early, 20*time.Minute)}}, nil); err != nil {
		t.Fatal(err)
	}
	var booked time.Time
	if err := pool.QueryRow(ctx, `SELECT booked_period FROM billing_usage_records WHERE id = 'tz'`).Scan(&booked); err != nil {
		t.Fatal(err)
	}
	if !booked.Equal(march) {
		t.Fatalf("booked in %s, want March", booked.Format("2006-01-02"))
	}
	rows, err := report.New(pool).TenantUsage(ctx, tenant, march.AddDate(0, -1, 0), march.AddDate(0, 2, 0), "day")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Bucket != "2026-03-01" {
		t.Fatalf("usage rows %+v, want one on 2026-03-01", rows)
	}
	rep, err := report.New(pool).GPUHours(ctx, report.Query{From: march.AddDate(0, -1, 0), To: march.AddDate(0, 2, 0), GroupBy: "tenant", Granularity: "month"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Bucket != "2026-03" || rep.Rows[0].Group != tenant.String() {
		t.Fatalf("report rows %+v, want March for %s", rep.Rows, tenant)
	}
}

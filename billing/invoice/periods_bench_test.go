package invoice_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/invoice"
	"gpucloud/internal/pgtest"
)

// BenchmarkPeriods lists periods over a year of hourly rollups (100 tenants x 8,760 hours x 2
// rollup keys = 1.75 million rows, written straight into billing_usage_hourly): finance's
// month-end list (every tenant, open months only) and one tenant's list.
//
//	go test ./billing/invoice -run '^$' -bench Periods -benchtime 5x
func BenchmarkPeriods(b *testing.B) {
	ctx := context.Background()
	pool := billingtest.Pool(b, pgtest.NewDatabase(b))
	svc := invoice.New(pool)
	svc.SetClock(func() time.Time { return time.Date(2027, 1, 10, 0, 0, 0, 0, time.UTC) })
	start := time.Now()
	if _, err := pool.Exec(ctx, `
		INSERT INTO billing_usage_hourly (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type, gpu_ms, records)
		SELECT ('00000000-0000-4000-8000-' || lpad(t::text, 12, '0'))::uuid, date_trunc('month', h)::date, false, h,
		    'gpu', tier, 'H100', '', 3600000, 1
		FROM generate_series(1, 100) t,
		     generate_series('2026-01-01'::timestamptz, '2026-12-31 23:00'::timestamptz, '1 hour') h,
		     unnest(ARRAY['dedicated', 'shared']) tier`); err != nil {
		b.Fatal(err)
	}
	// As ingestion lists them.
	if _, err := pool.Exec(ctx, `INSERT INTO billing_usage_months SELECT DISTINCT tenant_id, booked_period FROM billing_usage_hourly`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE billing_usage_hourly`); err != nil {
		b.Fatal(err)
	}
	b.Logf("1.75M rollup rows written in %s", time.Since(start).Round(time.Millisecond))
	idle := billingtest.NewGenerator(1, 1, time.Time{}, "").Tenants[0] // no usage: the index decides
	busy := uuid.MustParse("00000000-0000-4000-8000-000000000001")
	for _, c := range []struct {
		name string
		f    invoice.PeriodFilter
		want int
	}{
		{"all-open", invoice.PeriodFilter{Status: "open"}, 1000},
		{"one-tenant-idle", invoice.PeriodFilter{Tenant: &idle}, 0},
		{"one-tenant-a-year", invoice.PeriodFilter{Tenant: &busy}, 12},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ps, err := svc.Periods(ctx, c.f)
				if err != nil || len(ps) != c.want {
					b.Fatalf("%d periods, want %d: %v", len(ps), c.want, err)
				}
			}
		})
	}
}

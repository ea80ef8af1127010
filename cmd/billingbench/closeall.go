package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
)

// closeMonth gives every tenant of the ingested records what the control plane would record for
// three instances held in month (a dedicated GPU VM held all month; a shared-slice VM held ten
// days, stopped, then started again for two; each with its root disk: 8 allocation intervals per
// tenant, half of them crossing a price change), then closes the month for every tenant through
// the durable close job and times it.
func closeMonth(ctx context.Context, pool *pgxpool.Pool, month time.Time, workers int) error {
	end := month.AddDate(0, 1, 0)
	book := rating.NewBook(pool)
	for _, p := range []rating.Price{
		{Kind: "vm", InstanceType: "bench-dedicated", UnitPriceMicros: 300_000},
		{Kind: "vm", InstanceType: "bench-shared", UnitPriceMicros: 100_000},
		{Kind: "storage", UnitPriceMicros: 100},
	} {
		p.EffectiveFrom = month.AddDate(-1, 0, 0)
		if _, err := book.Add(ctx, p); err != nil {
			return fmt.Errorf("add price: %w", err)
		}
	}
	t0 := time.Now()
	tag, err := pool.Exec(ctx, `
		WITH t AS (SELECT DISTINCT tenant_id FROM billing_usage_hourly WHERE booked_period = $1),
		inst AS (SELECT tenant_id, gen_random_uuid() AS ded, gen_random_uuid() AS shr FROM t)
		INSERT INTO billing_allocations (tenant_id, instance_id, kind, resource_id, tier, gpu_model, instance_type, quantity, started_at, ended_at)
		SELECT tenant_id, x.inst, x.kind, x.inst::text || x.res, x.tier, 'H100', x.itype, x.q, x.s, x.e FROM inst,
		LATERAL (VALUES
		    (ded, 'gpu', '', 'dedicated', 'bench-dedicated', 1::bigint, $1::timestamptz, NULL::timestamptz),
		    (ded, 'vm', '', 'dedicated', 'bench-dedicated', 1, $1, NULL),
		    (ded, 'storage', '/root', 'dedicated', 'bench-dedicated', 100 * 1024, $1, NULL),
		    (shr, 'gpu', '', 'shared', 'bench-shared', 10240, $1 + interval '1 hour 7 seconds', $1 + interval '10 days'),
		    (shr, 'vm', '', 'shared', 'bench-shared', 1, $1 + interval '1 hour 7 seconds', $1 + interval '10 days'),
		    (shr, 'gpu', '#2', 'shared', 'bench-shared', 10240, $1 + interval '20 days', $1 + interval '22 days 3 seconds'),
		    (shr, 'vm', '#2', 'shared', 'bench-shared', 1, $1 + interval '20 days', $1 + interval '22 days 3 seconds'),
		    (shr, 'storage', '/root', 'shared', 'bench-shared', 40 * 1024, $1 + interval '1 hour 7 seconds', NULL)
		) AS x(inst, kind, res, tier, itype, q, s, e)`, month)
	if err != nil {
		return fmt.Errorf("allocations: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE billing_allocations`); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	fmt.Printf("allocation intervals: %d written in %s\n", tag.RowsAffected(), time.Since(t0).Round(time.Millisecond))

	svc := invoice.New(pool)
	svc.SetClock(func() time.Time { return end.AddDate(0, 0, 1) })
	runner := invoice.NewJobRunner(svc, nil)
	runner.Workers = workers
	t0 = time.Now()
	job, err := svc.StartCloseAll(ctx, month)
	if err != nil {
		return err
	}
	if _, err := runner.RunOnce(ctx); err != nil {
		return err
	}
	took := time.Since(t0)
	if job, err = svc.GetJob(ctx, job.ID); err != nil {
		return err
	}
	var invoices, lines, cents int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(total_cents), 0)::bigint,
		    (SELECT count(*) FROM billing_invoice_lines) FROM billing_invoices WHERE period = $1 AND status = 'closed'`, month).
		Scan(&invoices, &cents, &lines); err != nil {
		return err
	}
	fmt.Printf("closed %s for every tenant: job %s, %d closed, %d failed (%s); %d invoices, %d lines, total %s USD in %s (%d workers): %.0f tenants/s\n",
		month.Format("2006-01"), job.Status, job.Closed, job.Failed, job.LastError, invoices, lines,
		rating.FormatCents(cents), took.Round(time.Millisecond), workers, float64(invoices)/took.Seconds())
	return nil
}

// synthesize writes n hourly rollup rows of month straight into billing_usage_hourly, spread
// over tenants tenants (the generator's ids), as many records over that many tenants would
// leave: what a month-close reads of usage is the rollups, never the raw records.
func synthesize(ctx context.Context, pool *pgxpool.Pool, month time.Time, tenants, n int) error {
	t0 := time.Now()
	perTenant := max(n/tenants, 1)
	tag, err := pool.Exec(ctx, `
		INSERT INTO billing_usage_hourly (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type, gpu_ms, quota_mib_ms, records)
		SELECT t.id, $1::date, false, $1::timestamptz + (k / 2 % 744) * interval '1 hour', 'gpu',
		    CASE WHEN k % 2 = 0 THEN 'dedicated' ELSE 'shared' END, 'H100', '', 1800000, 0, 1
		FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $2)) t, generate_series(0, $3 - 1) k
		ON CONFLICT DO NOTHING`, month, tenants, perTenant)
	if err != nil {
		return fmt.Errorf("synthetic rollups: %w", err)
	}
	// As ingestion would have listed and summed them (where the code measured has those tables:
	// scripts/bench-billing-ab.sh runs this harness on older code too).
	for table, fill := range map[string]string{
		"billing_usage_months": `INSERT INTO billing_usage_months SELECT DISTINCT tenant_id, booked_period
			FROM billing_usage_hourly ON CONFLICT DO NOTHING`,
		"billing_usage_fleet_pending": `INSERT INTO billing_usage_fleet_pending SELECT hour, kind, tier, gpu_model, instance_type,
			sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records) FROM billing_usage_hourly GROUP BY 1, 2, 3, 4, 5`,
	} {
		if !tableExists(ctx, pool, table) {
			continue
		}
		if _, err := pool.Exec(ctx, fill); err != nil {
			return fmt.Errorf("synthetic rollups: %s: %w", table, err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE billing_usage_hourly`); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	fmt.Printf("synthetic hourly rollup rows: %d for %d tenants, written in %s\n", tag.RowsAffected(), tenants, time.Since(t0).Round(time.Millisecond))
	return nil
}

func tableExists(ctx context.Context, pool *pgxpool.Pool, name string) bool {
	var ok bool
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok)
	return err == nil && ok
}

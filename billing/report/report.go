// Package report answers finance's GPU-hour and revenue questions, and a tenant's own usage,
// from the hourly rollups only: a month is a few hundred thousand rollup rows however many raw
// records it took, and a few thousand of the fleet's (summed over tenants) for per-tier and
// per-model reports.
package report

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
)

// Query selects a GPU-hours report. From is inclusive, To exclusive; both whole hours (UTC).
type Query struct {
	From, To    time.Time
	GroupBy     string // tier, gpu_model or tenant
	Granularity string // day or month
}

// Row is one bucket and group. Revenue is the utilisation (session GPU time) valued by the price
// in force at each hour, rounded to the cent per row. Since charges are what tenants hold
// (HeldReport), it is not what is invoiced: it shows what idle holdings would cost if billed by use.
type Row struct {
	Bucket        string `json:"bucket"` // YYYY-MM-DD or YYYY-MM
	Group         string `json:"group"`
	GPUMs         int64  `json:"gpu_ms"`    // GPU-milliseconds (gpu_count x time), exact
	GPUHours      string `json:"gpu_hours"` // the same in hours, 6 decimals
	Records       int64  `json:"records"`   // records that started in the bucket
	RevenueCents  int64  `json:"revenue_cents"`
	Revenue       string `json:"revenue"`
	UnpricedGPUMs int64  `json:"unpriced_gpu_ms"` // usage with no price in force
}

// Report is a whole answer.
type Report struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	GroupBy     string    `json:"group_by"`
	Granularity string    `json:"granularity"`
	Currency    string    `json:"currency"`
	Rows        []Row     `json:"rows"`
	Total       Row       `json:"total"`
}

// FieldError names the query parameter a report was refused for.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// groupColumns keep their own type (uuid for tenants) until the final select: hashing and
// sorting a uuid is much cheaper than its text.
var groupColumns = map[string]string{"tier": "h.tier", "gpu_model": "h.gpu_model", "tenant": "h.tenant_id"}

// rollupsFor names the rollups a report reads: the tenants' when it needs tenants, else the
// fleet's (the same sums without the tenant: a month is a few thousand rows, not millions).
func rollupsFor(byTenant bool) string {
	if byTenant {
		return "billing_usage_hourly"
	}
	return "billing_usage_fleet"
}

// MaxRange bounds a report: ten years of hourly rollups is already a lot to read.
const MaxRange = 10 * 366 * 24 * time.Hour

func (q *Query) check() error {
	if _, ok := groupColumns[q.GroupBy]; !ok {
		return &FieldError{"group_by", fmt.Sprintf("%q is not one of tier, gpu_model, tenant", q.GroupBy)}
	}
	if q.Granularity != "day" && q.Granularity != "month" {
		return &FieldError{"granularity", fmt.Sprintf("%q is neither day nor month", q.Granularity)}
	}
	return checkRange(&q.From, &q.To)
}

func checkRange(from, to *time.Time) error {
	*from, *to = from.UTC(), to.UTC()
	switch {
	case from.IsZero():
		return &FieldError{"from", "is required"}
	case to.IsZero():
		return &FieldError{"to", "is required"}
	case !from.Truncate(time.Hour).Equal(*from):
		return &FieldError{"from", "must be a whole hour (usage is kept per hour)"}
	case !to.Truncate(time.Hour).Equal(*to):
		return &FieldError{"to", "must be a whole hour (usage is kept per hour)"}
	case !to.After(*from):
		return &FieldError{"to", "must be after from"}
	case to.Sub(*from) > MaxRange:
		return &FieldError{"to", "range is longer than ten years"}
	}
	return nil
}

func bucketExpr(granularity string) string {
	if granularity == "month" {
		return `to_char(h.hour AT TIME ZONE 'UTC', 'YYYY-MM')`
	}
	return `to_char(h.hour AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
}

// truncExpr is the bucket as a timestamp: formatted only once per output row.
func truncExpr(granularity string) string {
	return `date_trunc('` + granularity + `', h.hour, 'UTC')`
}

func bucketFormat(granularity string) string {
	if granularity == "month" {
		return "YYYY-MM"
	}
	return "YYYY-MM-DD"
}

// Reporter runs reports on pool.
type Reporter struct{ pool *pgxpool.Pool }

// New returns a reporter.
func New(pool *pgxpool.Pool) *Reporter { return &Reporter{pool: pool} }

// GPUHours runs a finance report over every tenant's gpu usage.
func (r *Reporter) GPUHours(ctx context.Context, q Query) (Report, error) {
	if err := q.check(); err != nil {
		return Report{}, err
	}
	if _, err := ingest.Flush(ctx, r.pool); err != nil {
		return Report{}, err
	}
	// Sum the rollups per hour and price key first (tenants fold away unless grouped by), price
	// those rows, sum quantities per price in integers, and only then compute money in numeric:
	// one exact division per bucket, group and price instead of one per rollup row.
	sql := `WITH ` + rating.PriceRangesCTE + `,
h AS (
    SELECT h.hour, h.kind, h.tier, h.gpu_model, h.instance_type, ` + groupColumns[q.GroupBy] + ` AS grp,
        sum(h.gpu_ms) AS gpu_ms, sum(h.quota_mib_ms) AS quota_mib_ms, 0::bigint AS vm_ms, sum(h.records) AS records
    FROM ` + rollupsFor(q.GroupBy == "tenant") + ` h
    WHERE h.kind = 'gpu' AND h.hour >= $1 AND h.hour < $2
    GROUP BY h.hour, h.kind, h.tier, h.gpu_model, h.instance_type, grp
),
priced AS (
    SELECT ` + truncExpr(q.Granularity) + ` AS bucket, h.grp, p.id AS price_id,
        coalesce(p.unit_price_micros, 0) AS price, ` + rating.UnitMsExpr + ` AS unit_ms,
        sum(h.gpu_ms) AS gpu_ms, sum(h.records) AS records, sum(` + rating.QuantityExpr + `) AS qty
    FROM h
    ` + rating.PriceJoin + `
    GROUP BY bucket, h.grp, p.id, p.unit_price_micros, unit_ms
)
SELECT to_char(bucket AT TIME ZONE 'UTC', '` + bucketFormat(q.Granularity) + `'), grp::text, sum(gpu_ms)::bigint, sum(records)::bigint,
    coalesce(round(sum(qty::numeric * price / unit_ms) / 10000), 0)::bigint,
    sum(CASE WHEN price_id IS NULL THEN gpu_ms ELSE 0 END)::bigint
FROM priced
GROUP BY bucket, grp ORDER BY bucket, grp`
	// A month of rollups is a few hundred thousand groups: give the aggregation memory rather
	// than let it spill to disk.
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("report: gpu-hours: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '256MB'`); err != nil {
		return Report{}, fmt.Errorf("report: gpu-hours: %w", err)
	}
	rows, err := tx.Query(ctx, sql, q.From, q.To)
	if err != nil {
		return Report{}, fmt.Errorf("report: gpu-hours: %w", err)
	}
	out := Report{From: q.From, To: q.To, GroupBy: q.GroupBy, Granularity: q.Granularity, Currency: "USD"}
	out.Rows, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (Row, error) {
		var x Row
		err := cr.Scan(&x.Bucket, &x.Group, &x.GPUMs, &x.Records, &x.RevenueCents, &x.UnpricedGPUMs)
		return x, err
	})
	if err != nil {
		return Report{}, fmt.Errorf("report: gpu-hours: %w", err)
	}
	out.Total.Bucket, out.Total.Group = "total", "all"
	for i := range out.Rows {
		x := &out.Rows[i]
		x.GPUHours, x.Revenue = Hours(x.GPUMs), rating.FormatCents(x.RevenueCents)
		out.Total.GPUMs += x.GPUMs
		out.Total.Records += x.Records
		out.Total.RevenueCents += x.RevenueCents
		out.Total.UnpricedGPUMs += x.UnpricedGPUMs
	}
	out.Total.GPUHours, out.Total.Revenue = Hours(out.Total.GPUMs), rating.FormatCents(out.Total.RevenueCents)
	if out.Rows == nil {
		out.Rows = []Row{}
	}
	return out, nil
}

// Hours writes milliseconds as hours with six decimals, exactly (integer arithmetic).
func Hours(ms int64) string {
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	const msPerHour = 3_600_000
	// 6 decimals of an hour = 3.6 ms; round half up on the integer remainder.
	frac := (ms%msPerHour*1_000_000 + msPerHour/2) / msPerHour
	whole := ms / msPerHour
	if frac == 1_000_000 {
		whole, frac = whole+1, 0
	}
	return fmt.Sprintf("%s%d.%06d", sign, whole, frac)
}

// UsageRow is a tenant's usage in one bucket for one kind/tier/model or instance type.
type UsageRow struct {
	Bucket       string `json:"bucket"`
	Kind         string `json:"kind"`
	Tier         string `json:"tier,omitempty"`
	GPUModel     string `json:"gpu_model,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	GPUMs        int64  `json:"gpu_ms"`
	GPUHours     string `json:"gpu_hours"`
	QuotaMiBMs   int64  `json:"quota_mib_ms"` // shared slices: memory quota MiB x ms
	VMMs         int64  `json:"vm_ms"`
	VMHours      string `json:"vm_hours"`
	Records      int64  `json:"records"`
}

// TenantUsage returns one tenant's usage per day or month over [from, to).
func (r *Reporter) TenantUsage(ctx context.Context, tenant uuid.UUID, from, to time.Time, granularity string) ([]UsageRow, error) {
	if granularity != "day" && granularity != "month" {
		return nil, &FieldError{"granularity", fmt.Sprintf("%q is neither day nor month", granularity)}
	}
	if err := checkRange(&from, &to); err != nil {
		return nil, err
	}
	if _, err := ingest.Flush(ctx, r.pool); err != nil {
		return nil, err
	}
	rows, err := r.pool.Query(ctx, `
SELECT `+bucketExpr(granularity)+` AS bucket, h.kind, h.tier, h.gpu_model, h.instance_type,
    sum(h.gpu_ms)::bigint, sum(h.quota_mib_ms)::bigint, sum(h.vm_ms)::bigint, sum(h.records)::bigint
FROM billing_usage_hourly h
WHERE h.tenant_id = $1 AND h.hour >= $2 AND h.hour < $3
GROUP BY bucket, h.kind, h.tier, h.gpu_model, h.instance_type
ORDER BY bucket, h.kind, h.tier, h.gpu_model, h.instance_type`, tenant, from, to)
	if err != nil {
		return nil, fmt.Errorf("report: tenant usage: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (UsageRow, error) {
		var u UsageRow
		err := cr.Scan(&u.Bucket, &u.Kind, &u.Tier, &u.GPUModel, &u.InstanceType, &u.GPUMs, &u.QuotaMiBMs, &u.VMMs, &u.Records)
		u.GPUHours, u.VMHours = Hours(u.GPUMs), Hours(u.VMMs)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("report: tenant usage: %w", err)
	}
	if out == nil {
		out = []UsageRow{}
	}
	return out, nil
}

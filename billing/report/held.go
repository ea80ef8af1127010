package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
)

// HeldQuery selects finance's month-close report: what tenants held (and were charged for) beside
// what they used, over [From, To) (whole hours, UTC), grouped by one or more dimensions.
type HeldQuery struct {
	From, To time.Time
	GroupBy  []string // of tier, gpu_model, tenant, instance_type; none: one total row
}

// HeldRow is one group. Quantities are exact integers (unit-milliseconds) with their hours beside.
// Held time is what is charged; utilised GPU time (from gpuserverd's sessions) is shown, never
// charged. Revenue is the held time priced by the price in force each second, rounded to the cent
// per row (invoices round per line, so sums may differ by rounding).
type HeldRow struct {
	Group            map[string]string `json:"group"`
	HeldGPUMs        int64             `json:"held_gpu_ms"` // dedicated GPUs x ms held
	HeldGPUHours     string            `json:"held_gpu_hours"`
	SliceMiBMs       int64             `json:"slice_mib_ms"` // shared slices: quota MiB x ms held
	SliceGiBHours    string            `json:"slice_gib_hours"`
	UtilisedGPUMs    int64             `json:"utilised_gpu_ms"` // GPU-ms inside CUDA sessions (not charged)
	UtilisedGPUHours string            `json:"utilised_gpu_hours"`
	VMMs             int64             `json:"vm_ms"`
	VMHours          string            `json:"vm_hours"`
	StorageMiBMs     int64             `json:"storage_mib_ms"`
	StorageGiBHours  string            `json:"storage_gib_hours"`
	RevenueCents     int64             `json:"revenue_cents"`
	Revenue          string            `json:"revenue"`
	UnpricedPieces   int64             `json:"unpriced_pieces"` // held time no price covered (not in revenue)
}

// HeldReport is a whole answer.
type HeldReport struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	GroupBy  []string  `json:"group_by"`
	Currency string    `json:"currency"`
	Rows     []HeldRow `json:"rows"`
	Total    HeldRow   `json:"total"`
}

// heldDims maps a dimension to its column in all_pieces (allocations) and in the hourly rollups.
var heldDims = map[string][2]string{
	"tier": {"a_tier", "h.tier"}, "gpu_model": {"a_gpu_model", "h.gpu_model"},
	"tenant": {"tenant_id", "h.tenant_id"}, "instance_type": {"a_instance_type", "h.instance_type"},
}

func (q *HeldQuery) check() error {
	seen := map[string]bool{}
	for _, d := range q.GroupBy {
		if _, ok := heldDims[d]; !ok || seen[d] {
			return &FieldError{"group_by", fmt.Sprintf("%q is not one of tier, gpu_model, tenant, instance_type (each once)", d)}
		}
		seen[d] = true
	}
	return checkRange(&q.From, &q.To)
}

// Held runs the month-close report. now bounds intervals still open.
func (r *Reporter) Held(ctx context.Context, q HeldQuery, now time.Time) (HeldReport, error) {
	if err := q.check(); err != nil {
		return HeldReport{}, err
	}
	if _, err := ingest.Flush(ctx, r.pool); err != nil {
		return HeldReport{}, err
	}
	var heldCols, usedCols []string
	for _, d := range q.GroupBy {
		heldCols, usedCols = append(heldCols, heldDims[d][0]), append(usedCols, heldDims[d][1])
	}
	sel := func(cols []string) (string, string) {
		if len(cols) == 0 {
			return "", ""
		}
		var s []string
		for _, c := range cols {
			s = append(s, c+"::text")
		}
		return strings.Join(s, ", ") + ", ", "GROUP BY " + strings.Join(cols, ", ")
	}
	hs, hg := sel(heldCols)
	us, ug := sel(usedCols)
	// $1 is unused by the held pieces (no tenant filter) but keeps the CTE's numbering.
	heldSQL := `WITH ` + rating.HeldPiecesCTE("$1::int IS NULL") + `
SELECT ` + hs + `
    coalesce(sum(CASE WHEN kind = 'gpu' AND a_tier <> 'shared' THEN quantity * ms END), 0)::bigint,
    coalesce(sum(CASE WHEN kind = 'gpu' AND a_tier = 'shared' THEN quantity * ms END), 0)::bigint,
    coalesce(sum(CASE WHEN kind = 'vm' THEN quantity * ms END), 0)::bigint,
    coalesce(sum(CASE WHEN kind = 'storage' THEN quantity * ms END), 0)::bigint,
    coalesce(round(sum((quantity * ms)::numeric * price / ` + rating.UnitMsHeld + `) / 10000), 0)::bigint,
    count(*) FILTER (WHERE price_id IS NULL)
FROM all_pieces ` + hg
	usedSQL := `SELECT ` + us + ` sum(h.gpu_ms)::bigint FROM ` + rollupsFor(slices.Contains(q.GroupBy, "tenant")) + ` h
WHERE h.kind = 'gpu' AND h.hour >= $1 AND h.hour < $2 ` + ug
	rows := map[string]*HeldRow{}
	row := func(vals []string) *HeldRow {
		k := strings.Join(vals, "\x00")
		if rows[k] == nil {
			g := map[string]string{}
			for i, d := range q.GroupBy {
				g[d] = vals[i]
			}
			rows[k] = &HeldRow{Group: g}
		}
		return rows[k]
	}
	n := len(q.GroupBy)
	if err := scanEach(ctx, r, heldSQL, []any{nil, q.From, q.To, now.UTC().Truncate(time.Second)}, n+6, func(v []any) {
		x := row(strs(v[:n]))
		x.HeldGPUMs, x.SliceMiBMs, x.VMMs = *v[n].(*int64), *v[n+1].(*int64), *v[n+2].(*int64)
		x.StorageMiBMs, x.RevenueCents, x.UnpricedPieces = *v[n+3].(*int64), *v[n+4].(*int64), *v[n+5].(*int64)
	}); err != nil {
		return HeldReport{}, err
	}
	if err := scanEach(ctx, r, usedSQL, []any{q.From, q.To}, n+1, func(v []any) {
		row(strs(v[:n])).UtilisedGPUMs = *v[n].(*int64)
	}); err != nil {
		return HeldReport{}, err
	}
	out := HeldReport{From: q.From, To: q.To, GroupBy: q.GroupBy, Currency: "USD", Rows: []HeldRow{}}
	if out.GroupBy == nil {
		out.GroupBy = []string{}
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t := &out.Total
	t.Group = map[string]string{}
	for _, k := range keys {
		x := rows[k]
		x.fill()
		out.Rows = append(out.Rows, *x)
		t.HeldGPUMs += x.HeldGPUMs
		t.SliceMiBMs += x.SliceMiBMs
		t.UtilisedGPUMs += x.UtilisedGPUMs
		t.VMMs += x.VMMs
		t.StorageMiBMs += x.StorageMiBMs
		t.RevenueCents += x.RevenueCents
		t.UnpricedPieces += x.UnpricedPieces
	}
	t.fill()
	return out, nil
}

func (x *HeldRow) fill() {
	x.HeldGPUHours, x.UtilisedGPUHours, x.VMHours = Hours(x.HeldGPUMs), Hours(x.UtilisedGPUMs), Hours(x.VMMs)
	x.SliceGiBHours, x.StorageGiBHours = Hours(x.SliceMiBMs/1024), Hours(x.StorageMiBMs/1024)
	x.Revenue = rating.FormatCents(x.RevenueCents)
}

// scanEach runs sql and hands each row's n values (n-? text columns then int64s) to each.
func scanEach(ctx context.Context, r *Reporter, sql string, args []any, n int, each func([]any)) error {
	rows, err := r.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("report: held: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		fds := rows.FieldDescriptions()
		v := make([]any, n)
		for i := range v {
			if fds[i].DataTypeOID == 25 { // text
				v[i] = new(string)
			} else {
				v[i] = new(int64)
			}
		}
		if err := rows.Scan(v...); err != nil {
			return fmt.Errorf("report: held: %w", err)
		}
		each(v)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("report: held: %w", err)
	}
	return nil
}

func strs(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = *x.(*string)
	}
	return out
}

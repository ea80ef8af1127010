package rating

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SQL pieces shared with the reports, so both price usage the same way. They expect the hourly
// rollup aliased h.
const (
	// PriceRangesCTE gives each price entry the end of its validity (the next entry's start).
	PriceRangesCTE = `price_ranges AS (
    SELECT id, kind, gpu_model, tier, instance_type, unit_price_micros, effective_from,
        lead(effective_from) OVER (PARTITION BY kind, gpu_model, tier, instance_type ORDER BY effective_from) AS effective_to
    FROM billing_prices)`
	// PriceJoin attaches the price in force at the rollup's hour (NULL when none).
	PriceJoin = `LEFT JOIN price_ranges p ON p.kind = h.kind AND p.gpu_model = h.gpu_model
    AND p.tier = h.tier AND p.instance_type = h.instance_type
    AND h.hour >= p.effective_from AND (p.effective_to IS NULL OR h.hour < p.effective_to)`
	// QuantityExpr is the billable quantity in unit-milliseconds.
	QuantityExpr = `(CASE WHEN h.kind = 'vm' THEN h.vm_ms WHEN h.tier = 'shared' THEN h.quota_mib_ms ELSE h.gpu_ms END)`
	// UnitMsExpr is how many unit-milliseconds make one priced unit: an hour, and for the shared
	// slice an hour of 1,024 MiB.
	UnitMsExpr = `(CASE WHEN h.kind = 'gpu' AND h.tier = 'shared' THEN 3686400000 ELSE 3600000 END)`
	// MicrosExpr is the exact value of a rollup row in micro-units (numeric: no overflow, no float).
	MicrosExpr = `(` + QuantityExpr + `::numeric * p.unit_price_micros / ` + UnitMsExpr + `)`
)

// Line is one priced line of usage: a kind/tier/model (or instance type), the month the usage
// happened, and the price entry that rated it.
type Line struct {
	LineNo          int       `json:"line_no"`
	Description     string    `json:"description"`
	Kind            string    `json:"kind"`
	Tier            string    `json:"tier,omitempty"`
	GPUModel        string    `json:"gpu_model,omitempty"`
	InstanceType    string    `json:"instance_type,omitempty"`
	UsagePeriod     string    `json:"usage_period"` // YYYY-MM
	Adjustment      bool      `json:"adjustment"`
	QuantityMs      int64     `json:"quantity_ms"` // unit-milliseconds; shared: MiB-milliseconds
	Quantity        string    `json:"quantity"`    // in Unit, 6 decimals
	Unit            string    `json:"unit"`
	UnitPriceMicros int64     `json:"unit_price_micros"`
	PriceID         uuid.UUID `json:"price_id"`
	AmountCents     int64     `json:"amount_cents"`
}

// UnpricedError lists usage no price entry covers; an invoice is not made until finance adds one.
type UnpricedError struct{ Items []string }

func (e *UnpricedError) Error() string {
	return "no price in force for: " + strings.Join(e.Items, "; ")
}

// Querier is a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const rateSQL = `
WITH ` + PriceRangesCTE + `
SELECT h.kind, h.tier, h.gpu_model, h.instance_type,
    -- Regular usage belongs to the booked month even where a session ran past its end;
    -- adjustments name the month the usage happened in.
    CASE WHEN h.adjustment THEN to_char(h.hour AT TIME ZONE 'UTC', 'YYYY-MM')
        ELSE to_char(h.booked_period, 'YYYY-MM') END AS usage_period, h.adjustment,
    p.id, coalesce(p.unit_price_micros, 0), min(h.hour),
    sum(` + QuantityExpr + `)::bigint AS qty,
    round(sum(` + QuantityExpr + `)::numeric / min(` + UnitMsExpr + `), 6)::text AS quantity,
    coalesce(round(sum(` + MicrosExpr + `) / 10000), 0)::bigint AS amount_cents
FROM billing_usage_hourly h
` + PriceJoin + `
WHERE h.tenant_id = $1 AND h.booked_period = $2
GROUP BY h.kind, h.tier, h.gpu_model, h.instance_type, usage_period, h.adjustment, p.id, p.unit_price_micros
ORDER BY h.adjustment, usage_period, h.kind, h.tier, h.gpu_model, h.instance_type, min(h.hour)`

// Rate prices a tenant's usage booked in period (the first day of a month) into numbered lines.
// Usage without a price in force returns an *UnpricedError.
func Rate(ctx context.Context, q Querier, tenant uuid.UUID, period time.Time) ([]Line, error) {
	rows, err := q.Query(ctx, rateSQL, tenant, period)
	if err != nil {
		return nil, fmt.Errorf("rating: rate %s %s: %w", tenant, period.Format("2006-01"), err)
	}
	defer rows.Close()
	var lines []Line
	var unpriced []string
	for rows.Next() {
		var l Line
		var priceID *uuid.UUID
		var first time.Time
		if err := rows.Scan(&l.Kind, &l.Tier, &l.GPUModel, &l.InstanceType, &l.UsagePeriod, &l.Adjustment,
			&priceID, &l.UnitPriceMicros, &first, &l.QuantityMs, &l.Quantity, &l.AmountCents); err != nil {
			return nil, fmt.Errorf("rating: scan line: %w", err)
		}
		l.Unit = Unit(l.Kind, l.Tier)
		if priceID == nil {
			unpriced = append(unpriced, fmt.Sprintf("%s from %s", key(l), first.UTC().Format(time.RFC3339)))
			continue
		}
		l.PriceID = *priceID
		l.LineNo = len(lines) + 1
		l.Description = describe(l)
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rating: read lines: %w", err)
	}
	if len(unpriced) > 0 {
		return nil, &UnpricedError{Items: unpriced}
	}
	return lines, nil
}

func key(l Line) string {
	if l.Kind == "vm" {
		return "vm " + l.InstanceType
	}
	return "gpu " + l.GPUModel + " " + l.Tier
}

func describe(l Line) string {
	var b strings.Builder
	if l.Adjustment {
		fmt.Fprintf(&b, "Adjustment for %s: ", l.UsagePeriod)
	}
	switch {
	case l.Kind == "vm":
		fmt.Fprintf(&b, "VM %s", l.InstanceType)
	default:
		fmt.Fprintf(&b, "GPU %s %s", l.GPUModel, l.Tier)
	}
	fmt.Fprintf(&b, ", %s %s at %s per %s", l.Quantity, l.Unit, FormatMicros(l.UnitPriceMicros), strings.TrimSuffix(l.Unit, "s"))
	return b.String()
}

// FormatMicros writes micro-units as a decimal amount ("4.250000").
func FormatMicros(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	return fmt.Sprintf("%s%d.%06d", sign, m/1_000_000, m%1_000_000)
}

// FormatCents writes cents as a decimal amount ("12.34").
func FormatCents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

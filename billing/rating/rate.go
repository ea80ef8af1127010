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

// HeldPiecesCTE names, after WITH, the CTEs that cut allocation intervals into priced pieces:
// each interval matching where (over billing_allocations a) clipped to [$2, $3) and, while still
// open, to $4 ("now"), then cut where the price in force changes. all_pieces has one row per piece:
// the allocation's id, kind, price key (tier, gpu_model, instance_type: ” where the kind is not
// priced by it), its raw dimensions (tenant_id, a_tier, a_gpu_model, a_instance_type) for reports,
// quantity, price_id and price (NULL and 0 for time no price covers), start s and ms. Time is whole
// seconds (intervals are dated to the second).
func HeldPiecesCTE(where string) string {
	return HeldPiecesOver(Window{From: "billing_allocations a", Where: where, Lo: "$2", Hi: "$3", Now: "$4"})
}

// Window says which allocations HeldPiecesOver prices over which bounds: SQL expressions that may
// differ per row (e.g. one window per tenant and month).
type Window struct {
	From   string // the FROM clause, naming billing_allocations a
	Where  string // which rows
	Lo, Hi string // the window [Lo, Hi)
	Now    string // where intervals still open end
	Carry  string // an expression every piece carries as w (none when empty)
}

// HeldPiecesOver is HeldPiecesCTE over the window w.
func HeldPiecesOver(w Window) string {
	// Without a carried expression the SQL is exactly what it was before windows (the close's
	// rating and the reports): no extra column, no extra condition.
	heldW, piecesW, sameW := "", "", ""
	if w.Carry != "" {
		heldW, piecesW, sameW = ",\n        "+w.Carry+" AS w", ", h.w", " AND x.w = h.w"
	}
	return PriceRangesCTE + `,
held AS (
    SELECT a.id, a.kind, a.quantity, a.tenant_id, a.tier AS a_tier, a.gpu_model AS a_gpu_model, a.instance_type AS a_instance_type,
        CASE WHEN a.kind = 'gpu' THEN a.tier ELSE '' END AS tier,
        CASE WHEN a.kind = 'gpu' THEN a.gpu_model ELSE '' END AS gpu_model,
        CASE WHEN a.kind = 'vm' THEN a.instance_type ELSE '' END AS instance_type,
        greatest(a.started_at, ` + w.Lo + `) AS s, least(coalesce(a.ended_at, ` + w.Now + `), ` + w.Hi + `) AS e` + heldW + `
    FROM ` + w.From + `
    WHERE ` + w.Where + ` AND a.started_at < ` + w.Hi + ` AND (a.ended_at IS NULL OR a.ended_at > ` + w.Lo + `)
),
pieces AS (
    SELECT h.id, h.kind, h.tier, h.gpu_model, h.instance_type, h.tenant_id, h.a_tier, h.a_gpu_model, h.a_instance_type,
        h.quantity, p.id AS price_id, p.unit_price_micros AS price, greatest(h.s, p.effective_from) AS s,
        (extract(epoch FROM least(h.e, coalesce(p.effective_to, h.e)) - greatest(h.s, p.effective_from)) * 1000)::bigint AS ms` + piecesW + `
    FROM held h
    JOIN price_ranges p ON p.kind = h.kind AND p.gpu_model = h.gpu_model AND p.tier = h.tier
        AND p.instance_type = h.instance_type AND p.effective_from < h.e AND (p.effective_to IS NULL OR p.effective_to > h.s)
    WHERE h.e > h.s
),
unpriced AS (
    SELECT h.id, h.kind, h.tier, h.gpu_model, h.instance_type, h.tenant_id, h.a_tier, h.a_gpu_model, h.a_instance_type,
        h.quantity, NULL::uuid AS price_id, 0::bigint AS price, h.s,
        (extract(epoch FROM h.e - h.s) * 1000)::bigint - coalesce((SELECT sum(x.ms) FROM pieces x WHERE x.id = h.id` + sameW + `), 0)::bigint AS ms` + piecesW + `
    FROM held h WHERE h.e > h.s
),
all_pieces AS (
    SELECT * FROM pieces UNION ALL SELECT * FROM unpriced WHERE ms > 0
)`
}

// rateSQL prices a tenant's ($1) allocation pieces, summed per kind, price key and price entry.
var rateSQL = `
WITH ` + HeldPiecesCTE("a.tenant_id = $1") + `
SELECT kind, tier, gpu_model, instance_type, price_id, price, min(s),
    sum(quantity * ms)::bigint AS qty,
    round(sum(quantity * ms)::numeric / min(` + UnitMsHeld + `), 6)::text AS quantity,
    round(sum(quantity * ms)::numeric * price / min(` + UnitMsHeld + `) / 10000)::bigint AS amount_cents
FROM all_pieces
GROUP BY kind, tier, gpu_model, instance_type, price_id, price
ORDER BY kind, tier, gpu_model, instance_type, min(s)`

// UnitMsHeld is how many unit-milliseconds of an allocation piece make one priced unit: an hour,
// and for quantities in MiB (shared slices, storage) an hour of 1,024 MiB.
const UnitMsHeld = `(CASE WHEN kind = 'storage' OR (kind = 'gpu' AND tier = 'shared') THEN 3686400000 ELSE 3600000 END)`

// Rate prices what a tenant held during period (the first day of a month) into numbered lines.
// Time without a price in force returns an *UnpricedError.
func Rate(ctx context.Context, q Querier, tenant uuid.UUID, period time.Time) ([]Line, error) {
	end := period.AddDate(0, 1, 0)
	return RateRange(ctx, q, tenant, period, end, end)
}

// RateRange prices what a tenant held over [from, to), counting intervals still open up to now.
// Time without a price returns the priced lines and an *UnpricedError.
func RateRange(ctx context.Context, q Querier, tenant uuid.UUID, from, to, now time.Time) ([]Line, error) {
	rows, err := q.Query(ctx, rateSQL, RateArgs(tenant, from, to, now)...)
	if err != nil {
		return nil, fmt.Errorf("rating: rate %s %s: %w", tenant, from.Format("2006-01"), err)
	}
	return ScanLines(rows, from)
}

// RateSQL is RateRange's query, for callers that send it in a batch with other statements
// (RateArgs are its arguments, ScanLines reads its rows).
func RateSQL() string { return rateSQL }

// RateArgs are RateSQL's arguments.
func RateArgs(tenant uuid.UUID, from, to, now time.Time) []any {
	return []any{tenant, from, to, now.UTC().Truncate(time.Second)}
}

// ScanLines reads RateSQL's rows (and closes them) into numbered lines of the month from.
func ScanLines(rows pgx.Rows, from time.Time) ([]Line, error) {
	defer rows.Close()
	var lines []Line
	var unpriced []string
	for rows.Next() {
		l := Line{UsagePeriod: from.UTC().Format("2006-01")}
		var priceID *uuid.UUID
		var first time.Time
		if err := rows.Scan(&l.Kind, &l.Tier, &l.GPUModel, &l.InstanceType, &priceID, &l.UnitPriceMicros, &first,
			&l.QuantityMs, &l.Quantity, &l.AmountCents); err != nil {
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
		// The priced lines come back too: a running balance counts them; a close refuses.
		return lines, &UnpricedError{Items: unpriced}
	}
	return lines, nil
}

func key(l Line) string {
	switch l.Kind {
	case "vm":
		return "vm " + l.InstanceType
	case "storage":
		return "storage"
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
	case l.Kind == "storage":
		b.WriteString("Storage")
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

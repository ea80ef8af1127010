// Package invoice closes a tenant's monthly period into an invoice that never changes afterwards,
// and reads invoices back. The database enforces the immutability too (triggers in 00100).
package invoice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/credit"
	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
	"gpucloud/billing/webhook"
)

// Invoice is a closed period of one tenant.
type Invoice struct {
	ID         uuid.UUID `json:"id"`
	TenantID   uuid.UUID `json:"tenant_id"`
	Period     string    `json:"period"` // YYYY-MM
	Status     string    `json:"status"`
	Currency   string    `json:"currency"`
	TotalCents int64     `json:"total_cents"`
	Total      string    `json:"total"` // decimal, for people
	// CreditCents is what prepaid credit paid of the total; AmountDueCents the rest.
	CreditCents    int64         `json:"credit_cents"`
	AmountDueCents int64         `json:"amount_due_cents"`
	ClosedAt       time.Time     `json:"closed_at"`
	Lines          []rating.Line `json:"lines,omitempty"`
}

// Errors callers map to HTTP statuses.
var (
	ErrAlreadyClosed = errors.New("period is already closed")
	ErrNotEnded      = errors.New("period has not ended yet")
	ErrNotFound      = errors.New("invoice not found")
)

// Service closes periods and reads invoices.
type Service struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// New returns the invoice service on pool.
func New(pool *pgxpool.Pool) *Service { return &Service{pool: pool, now: time.Now} }

// SetClock replaces the clock deciding whether a period has ended (tests, benchmarks).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// ParsePeriod reads "YYYY-MM" as the first instant of that month, UTC.
func ParsePeriod(v string) (time.Time, error) {
	t, err := time.Parse("2006-01", v)
	if err != nil {
		return time.Time{}, fmt.Errorf("period %q is not YYYY-MM", v)
	}
	return t, nil
}

// Close rates the tenant's usage booked in period, writes the invoice and its lines, and marks
// it closed, all in one transaction under the tenant's exclusive billing lock. Records arriving
// later for this month are booked into the next open month as adjustments.
func (s *Service) Close(ctx context.Context, tenant uuid.UUID, period time.Time) (Invoice, error) {
	if end := period.AddDate(0, 1, 0); s.now().Before(end) {
		return Invoice{}, fmt.Errorf("%w: %s ends %s", ErrNotEnded, period.Format("2006-01"), end.Format(time.RFC3339))
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	// Round trips are what a month-end close of thousands of tenants waits on, so the reads go
	// in one batch and the writes in another; statements of a batch run in order, each seeing
	// the ones before. Charges are what the tenant held (allocations), not its usage records:
	// no rollup flush is needed, and closes of many tenants do not queue on the flush lock.
	reads := &pgx.Batch{}
	reads.Queue(ingest.LockTenantSQL, tenant)
	reads.Queue(`SELECT EXISTS (SELECT 1 FROM billing_invoices WHERE tenant_id = $1 AND period = $2)`, tenant, period)
	end := period.AddDate(0, 1, 0)
	reads.Queue(rating.RateSQL(), rating.RateArgs(tenant, period, end, end)...)
	lines, err := readRated(tx.SendBatch(ctx, reads), tenant, period)
	if err != nil {
		return Invoice{}, err
	}
	inv := Invoice{ID: uuid.New(), TenantID: tenant, Period: period.Format("2006-01"), Status: "closed", Currency: "USD", Lines: lines}
	for _, l := range lines {
		inv.TotalCents += l.AmountCents
	}
	writes := &pgx.Batch{}
	writes.Queue(`INSERT INTO billing_invoices (id, tenant_id, period, currency) VALUES ($1, $2, $3, $4)`, inv.ID, tenant, period, inv.Currency)
	if len(lines) > 0 {
		writes.Queue(insertLinesSQL, lineArrays(inv.ID, period, lines)...)
	}
	// Prepaid credit pays what it can, in priority and expiry order.
	writes.Queue(credit.ApplySQL, tenant, period, inv.TotalCents, inv.ID)
	// The trigger checks here that the total equals the sum of the lines.
	writes.Queue(`UPDATE billing_invoices SET status = 'closed', total_cents = $2, closed_at = now(),
		credit_cents = (SELECT coalesce(sum(amount_cents), 0) FROM billing_credit_applications WHERE invoice_id = $1)
		WHERE id = $1 RETURNING closed_at, credit_cents`, inv.ID, inv.TotalCents)
	if err := writeInvoice(tx.SendBatch(ctx, writes), &inv); err != nil {
		return Invoice{}, err
	}
	inv.AmountDueCents = inv.TotalCents - inv.CreditCents
	if err := webhook.Enqueue(ctx, tx, tenant, webhook.InvoiceClosed, s.now(), map[string]any{"invoice_id": inv.ID,
		"period": inv.Period, "total_cents": inv.TotalCents, "credit_cents": inv.CreditCents, "amount_due_cents": inv.AmountDueCents}); err != nil {
		return Invoice{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Invoice{}, fmt.Errorf("invoice: commit: %w", err)
	}
	inv.ClosedAt = inv.ClosedAt.UTC()
	inv.Total = rating.FormatCents(inv.TotalCents)
	return inv, nil
}

// readRated reads the close's first batch: the lock, whether the month is closed, its lines.
func readRated(br pgx.BatchResults, tenant uuid.UUID, period time.Time) ([]rating.Line, error) {
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("invoice: lock tenant: %w", err)
	}
	var exists bool
	if err := br.QueryRow().Scan(&exists); err != nil {
		return nil, fmt.Errorf("invoice: check period: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("invoice: rate: %w", err)
	}
	lines, err := rating.ScanLines(rows, period)
	if exists {
		return nil, fmt.Errorf("%w: %s for tenant %s", ErrAlreadyClosed, period.Format("2006-01"), tenant)
	}
	if err != nil {
		return nil, err
	}
	return lines, br.Close()
}

// writeInvoice reads the close's second batch: the invoice, its lines, the credit drawn, and
// the closing update (which fills inv's closed time and credit).
func writeInvoice(br pgx.BatchResults, inv *Invoice) error {
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("invoice: insert: %w", err)
	}
	if len(inv.Lines) > 0 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("invoice: insert lines: %w", err)
		}
	}
	var drawn int64
	if err := br.QueryRow().Scan(&drawn); err != nil {
		return fmt.Errorf("invoice: apply credit: %w", err)
	}
	if err := br.QueryRow().Scan(&inv.ClosedAt, &inv.CreditCents); err != nil {
		return fmt.Errorf("invoice: close: %w", err)
	}
	return br.Close()
}

// insertLinesSQL inserts an invoice's lines from arrays, one statement whatever their number.
const insertLinesSQL = `INSERT INTO billing_invoice_lines (invoice_id, line_no, description, kind, tier, gpu_model,
    instance_type, usage_period, adjustment, quantity_ms, unit, unit_price_micros, price_id, amount_cents)
SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::date[],
    $9::bool[], $10::bigint[], $11::text[], $12::bigint[], $13::uuid[], $14::bigint[])`

func lineArrays(id uuid.UUID, period time.Time, lines []rating.Line) []any {
	n := len(lines)
	no, desc, kind, tier, model, itype := make([]int32, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	usage, adj, qty, unit, price, priceID, amount := make([]time.Time, n), make([]bool, n), make([]int64, n), make([]string, n),
		make([]int64, n), make([]uuid.UUID, n), make([]int64, n)
	for i, l := range lines {
		no[i], desc[i], kind[i], tier[i], model[i], itype[i] = int32(l.LineNo), l.Description, l.Kind, l.Tier, l.GPUModel, l.InstanceType
		usage[i], adj[i], qty[i], unit[i], price[i], priceID[i], amount[i] = period, l.Adjustment, l.QuantityMs, l.Unit,
			l.UnitPriceMicros, l.PriceID, l.AmountCents
	}
	return []any{id, no, desc, kind, tier, model, itype, usage, adj, qty, unit, price, priceID, amount}
}

// Get returns an invoice with its lines. With tenant set, an invoice of another tenant is
// ErrNotFound (never "forbidden": its existence is not disclosed).
func (s *Service) Get(ctx context.Context, id uuid.UUID, tenant *uuid.UUID) (Invoice, error) {
	invs, err := s.list(ctx, `WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2) AND status = 'closed'`, id, tenant)
	if err != nil {
		return Invoice{}, err
	}
	if len(invs) == 0 {
		return Invoice{}, ErrNotFound
	}
	inv := invs[0]
	rows, err := s.pool.Query(ctx, `
		SELECT line_no, description, kind, tier, gpu_model, instance_type, to_char(usage_period, 'YYYY-MM'),
		    adjustment, quantity_ms, unit, unit_price_micros, price_id, amount_cents,
		    round(quantity_ms::numeric / CASE WHEN unit = 'gib-hour' THEN 3686400000 ELSE 3600000 END, 6)::text
		FROM billing_invoice_lines WHERE invoice_id = $1 ORDER BY line_no`, id)
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: read lines: %w", err)
	}
	inv.Lines, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (rating.Line, error) {
		var l rating.Line
		err := r.Scan(&l.LineNo, &l.Description, &l.Kind, &l.Tier, &l.GPUModel, &l.InstanceType, &l.UsagePeriod,
			&l.Adjustment, &l.QuantityMs, &l.Unit, &l.UnitPriceMicros, &l.PriceID, &l.AmountCents, &l.Quantity)
		return l, err
	})
	if err != nil {
		return Invoice{}, fmt.Errorf("invoice: read lines: %w", err)
	}
	return inv, nil
}

// List returns closed invoices, newest period first then by tenant; tenant nil lists every
// tenant's. With after, the list resumes after that period and tenant (cursor paging).
func (s *Service) List(ctx context.Context, tenant *uuid.UUID, limit int, after ...*Cursor) ([]Invoice, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	var c *Cursor
	if len(after) > 0 {
		c = after[0]
	}
	cp, ct := cursorArgs(c)
	return s.list(ctx, `WHERE ($1::uuid IS NULL OR tenant_id = $1) AND status = 'closed'
		AND ($3::date IS NULL OR period < $3 OR (period = $3 AND tenant_id > $4::uuid))
		ORDER BY period DESC, tenant_id LIMIT $2`, tenant, limit, cp, ct)
}

func (s *Service) list(ctx context.Context, where string, args ...any) ([]Invoice, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, tenant_id, to_char(period, 'YYYY-MM'), status, currency, total_cents, credit_cents, closed_at
		FROM billing_invoices `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("invoice: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Invoice, error) {
		var inv Invoice
		err := r.Scan(&inv.ID, &inv.TenantID, &inv.Period, &inv.Status, &inv.Currency, &inv.TotalCents, &inv.CreditCents, &inv.ClosedAt)
		inv.AmountDueCents = inv.TotalCents - inv.CreditCents
		inv.ClosedAt = inv.ClosedAt.UTC()
		inv.Total = rating.FormatCents(inv.TotalCents)
		return inv, err
	})
	if err != nil {
		return nil, fmt.Errorf("invoice: list: %w", err)
	}
	return out, nil
}

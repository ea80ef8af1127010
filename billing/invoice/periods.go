package invoice

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Period is a tenant's month as billing sees it: closed (it has its final invoice) or open with
// something held or usage booked in it. A month with neither is not listed: there is nothing to bill.
type Period struct {
	TenantID uuid.UUID `json:"tenant_id"`
	Period   string    `json:"period"` // YYYY-MM
	Status   string    `json:"status"` // open or closed
	// Ended: the month is over, so an open one can be closed now.
	Ended      bool       `json:"ended"`
	InvoiceID  *uuid.UUID `json:"invoice_id,omitempty"`
	TotalCents *int64     `json:"total_cents,omitempty"`
	ClosedAt   *time.Time `json:"closed_at,omitempty"`
}

// PeriodFilter selects periods: of one tenant (nil: all), with one status ("": both), at most
// Limit (1..1000; 0: 1000), newest month first.
type PeriodFilter struct {
	Tenant *uuid.UUID
	Status string
	Limit  int
	After  *Cursor // resume after this month and tenant
}

// Periods lists months with usage or an invoice. A month is listed from the moment its first
// usage is acknowledged (billing_usage_months is written with the records).
func (s *Service) Periods(ctx context.Context, f PeriodFilter) ([]Period, error) {
	if f.Status != "" && f.Status != "open" && f.Status != "closed" {
		return nil, fmt.Errorf("invoice: period status %q is neither open nor closed", f.Status)
	}
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 1000
	}
	// Booked months are listed in billing_usage_months (one row per tenant and month, written
	// with the usage). The tenant condition is written only when there is one, so the planner
	// sees it as an index bound.
	tenant := func(alias string) string { return "$3::uuid IS NULL" }
	cp, ct := cursorArgs(f.After)
	args := []any{f.Status, f.Limit, f.Tenant, s.now().UTC().Truncate(time.Second), cp, ct}
	if f.Tenant != nil {
		tenant = func(alias string) string { return alias + ".tenant_id = $3::uuid" }
	}
	rows, err := s.pool.Query(ctx, `
		WITH booked AS (
		    SELECT m.tenant_id, m.booked_period FROM billing_usage_months m WHERE `+tenant("m")+`
		), held AS (
		    -- Months something was held in (allocations are few per tenant: one per transition).
		    SELECT DISTINCT a.tenant_id, m::date AS booked_period FROM billing_allocations a
		    CROSS JOIN LATERAL generate_series(date_trunc('month', a.started_at, 'UTC'),
		        date_trunc('month', coalesce(a.ended_at, $4) - interval '1 second', 'UTC'), interval '1 month') AS m
		    WHERE `+tenant("a")+` AND coalesce(a.ended_at, $4) > a.started_at
		), months AS (
		    SELECT * FROM booked UNION SELECT * FROM held
		), closed AS (
		    SELECT i.id, i.tenant_id, i.period, i.total_cents, i.closed_at FROM billing_invoices i
		    WHERE i.status = 'closed' AND `+tenant("i")+`
		)
		SELECT coalesce(c.tenant_id, b.tenant_id) AS tenant, coalesce(c.period, b.booked_period) AS month,
		    c.id, c.total_cents, c.closed_at
		FROM months b FULL JOIN closed c ON c.tenant_id = b.tenant_id AND c.period = b.booked_period
		WHERE ($1 = '' OR ($1 = 'closed') = (c.id IS NOT NULL))
		    AND ($5::date IS NULL OR coalesce(c.period, b.booked_period) < $5
		        OR (coalesce(c.period, b.booked_period) = $5 AND coalesce(c.tenant_id, b.tenant_id) > $6::uuid))
		ORDER BY month DESC, tenant
		LIMIT $2`, args...)
	if err != nil {
		return nil, fmt.Errorf("invoice: list periods: %w", err)
	}
	now := s.now()
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Period, error) {
		var p Period
		var month time.Time
		if err := r.Scan(&p.TenantID, &month, &p.InvoiceID, &p.TotalCents, &p.ClosedAt); err != nil {
			return p, err
		}
		p.Period, p.Status, p.Ended = month.Format("2006-01"), "open", !now.Before(month.AddDate(0, 1, 0))
		if p.InvoiceID != nil {
			p.Status = "closed"
			t := p.ClosedAt.UTC()
			p.ClosedAt = &t
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("invoice: list periods: %w", err)
	}
	return out, nil
}

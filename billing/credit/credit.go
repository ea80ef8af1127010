// Package credit keeps prepaid credit grants, applies them to invoices at close, and answers a
// tenant's running balance: credit left minus what it has held but not yet been invoiced for.
package credit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/rating"
)

// Grant is prepaid credit of a tenant.
type Grant struct {
	ID             uuid.UUID  `json:"id"`
	TenantID       uuid.UUID  `json:"tenant_id"`
	AmountCents    int64      `json:"amount_cents"`
	RemainingCents int64      `json:"remaining_cents"`
	Priority       int        `json:"priority"` // lower is drawn first
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	Note           string     `json:"note,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// FieldError names the field a request was refused for.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// MaxGrantCents bounds a grant (ten million currency units).
const MaxGrantCents = 1_000_000_000

// Service keeps grants and budgets.
type Service struct{ pool *pgxpool.Pool }

// New returns the credit service on pool.
func New(pool *pgxpool.Pool) *Service { return &Service{pool: pool} }

// AddGrant stores a new grant.
func (s *Service) AddGrant(ctx context.Context, g Grant, now time.Time) (Grant, error) {
	switch {
	case g.TenantID == uuid.Nil:
		return g, &FieldError{"tenant_id", "is required"}
	case g.AmountCents <= 0 || g.AmountCents > MaxGrantCents:
		return g, &FieldError{"amount_cents", fmt.Sprintf("must be 1..%d", MaxGrantCents)}
	case g.Priority < 0 || g.Priority > 1000:
		return g, &FieldError{"priority", "must be 0..1000"}
	case g.ExpiresAt != nil && !g.ExpiresAt.After(now):
		return g, &FieldError{"expires_at", "must be in the future"}
	case len(g.Note) > 500:
		return g, &FieldError{"note", "at most 500 bytes"}
	}
	g.RemainingCents = g.AmountCents
	err := s.pool.QueryRow(ctx, `INSERT INTO billing_credit_grants (tenant_id, amount_cents, remaining_cents, priority, expires_at, note)
		VALUES ($1, $2, $2, $3, $4, $5) RETURNING id, created_at`, g.TenantID, g.AmountCents, g.Priority, g.ExpiresAt, g.Note).
		Scan(&g.ID, &g.CreatedAt)
	if err != nil {
		return g, fmt.Errorf("credit: add grant: %w", err)
	}
	return g, nil
}

// Grants lists a tenant's grants (nil: every tenant's) in the order they are drawn.
func (s *Service) Grants(ctx context.Context, tenant *uuid.UUID) ([]Grant, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, tenant_id, amount_cents, remaining_cents, priority, expires_at, note, created_at
		FROM billing_credit_grants WHERE $1::uuid IS NULL OR tenant_id = $1 ORDER BY tenant_id, `+drawOrder, tenant)
	if err != nil {
		return nil, fmt.Errorf("credit: grants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		err := r.Scan(&g.ID, &g.TenantID, &g.AmountCents, &g.RemainingCents, &g.Priority, &g.ExpiresAt, &g.Note, &g.CreatedAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("credit: grants: %w", err)
	}
	return out, nil
}

// drawOrder is the order grants are drawn in: priority, then the soonest to expire, then oldest.
const drawOrder = `priority, expires_at NULLS LAST, created_at, id`

// ApplySQL draws up to $3 cents from tenant $1's grants usable for the period starting $2 (not
// expired before it began) in draw order, records what invoice $4 drew from each, and returns the
// total drawn: one statement, so an invoice close sends it in a batch with its other writes. The
// grants are locked first (FOR UPDATE), so concurrent closes of the tenant's months draw one after
// the other.
const ApplySQL = `
WITH locked AS (
    SELECT id, remaining_cents, priority, expires_at, created_at FROM billing_credit_grants
    WHERE tenant_id = $1 AND remaining_cents > 0 AND (expires_at IS NULL OR expires_at > $2)
    FOR UPDATE
),
ordered AS (
    SELECT id, remaining_cents, sum(remaining_cents) OVER (ORDER BY ` + drawOrder + `) AS through
    FROM locked
),
draws AS (
    -- What is still due when this grant's turn comes, capped by what it has left.
    SELECT id, least(remaining_cents, greatest($3::bigint - (through - remaining_cents), 0)) AS take FROM ordered
),
drawn AS (
    UPDATE billing_credit_grants g SET remaining_cents = g.remaining_cents - d.take
    FROM draws d WHERE g.id = d.id AND d.take > 0
    RETURNING g.id, d.take
),
recorded AS (
    INSERT INTO billing_credit_applications (invoice_id, grant_id, amount_cents) SELECT $4, id, take FROM drawn
)
SELECT coalesce(sum(take), 0)::bigint FROM drawn`

// Apply runs ApplySQL in tx (the invoice's close transaction) and returns what was drawn.
func Apply(ctx context.Context, tx pgx.Tx, tenant, invoiceID uuid.UUID, period time.Time, due int64) (int64, error) {
	var drawn int64
	if err := tx.QueryRow(ctx, ApplySQL, tenant, period, due, invoiceID).Scan(&drawn); err != nil {
		return 0, fmt.Errorf("credit: apply: %w", err)
	}
	return drawn, nil
}

// Balance is a tenant's running balance.
type Balance struct {
	TenantID uuid.UUID `json:"tenant_id"`
	At       time.Time `json:"at"`
	// CreditCents is what the tenant's unexpired grants have left.
	CreditCents int64 `json:"credit_cents"`
	// UnbilledCents is what the tenant has held since its last closed month, priced so far.
	UnbilledCents int64 `json:"unbilled_cents"`
	// MonthToDateCents is the current month's part of it (what budgets compare with).
	MonthToDateCents int64 `json:"month_to_date_cents"`
	// BalanceCents = CreditCents - UnbilledCents: negative is owed beyond the credit.
	BalanceCents int64  `json:"balance_cents"`
	Balance      string `json:"balance"`
	// Unpriced lists held resources no price covers yet (not counted).
	Unpriced []string `json:"unpriced,omitempty"`
	Currency string   `json:"currency"`
}

// Balance computes tenant's balance at now.
func (s *Service) Balance(ctx context.Context, tenant uuid.UUID, now time.Time) (Balance, error) {
	b := Balance{TenantID: tenant, At: now.UTC(), Currency: "USD"}
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(remaining_cents), 0)::bigint FROM billing_credit_grants
		WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)`, tenant, now).Scan(&b.CreditCents); err != nil {
		return b, fmt.Errorf("credit: balance: %w", err)
	}
	// Unbilled: from the month after the last closed invoice (or the first thing held) to now.
	var from *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT greatest(
		    (SELECT max(period) + interval '1 month' FROM billing_invoices WHERE tenant_id = $1 AND status = 'closed'),
		    (SELECT date_trunc('month', min(started_at), 'UTC') FROM billing_allocations WHERE tenant_id = $1))`,
		tenant).Scan(&from); err != nil {
		return b, fmt.Errorf("credit: balance: %w", err)
	}
	thisMonth := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if from != nil {
		for m := from.UTC(); m.Before(now); m = m.AddDate(0, 1, 0) {
			lines, err := rating.RateRange(ctx, s.pool, tenant, m, m.AddDate(0, 1, 0), now)
			var up *rating.UnpricedError
			if errors.As(err, &up) {
				b.Unpriced = append(b.Unpriced, up.Items...) // the priced lines still count
			} else if err != nil {
				return b, err
			}
			for _, l := range lines {
				b.UnbilledCents += l.AmountCents
				if m.Equal(thisMonth) {
					b.MonthToDateCents += l.AmountCents
				}
			}
		}
	}
	b.BalanceCents = b.CreditCents - b.UnbilledCents
	b.Balance = rating.FormatCents(b.BalanceCents)
	return b, nil
}

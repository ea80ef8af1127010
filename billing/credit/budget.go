package credit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Hard-stop modes, applied when a tenant's prepaid credit is exhausted.
const (
	StopNone      = "none"
	StopCreate    = "block_create"   // no new instances
	StopInstances = "stop_instances" // no new instances, and running ones are stopped
)

// Budget is a tenant's monthly budget.
type Budget struct {
	TenantID   uuid.UUID `json:"tenant_id"`
	LimitCents int64     `json:"limit_cents"`
	Thresholds []int     `json:"thresholds"` // percent of the limit, ascending, e.g. 50, 80, 100
	HardStop   string    `json:"hard_stop"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ErrNoBudget is a tenant without a budget.
var ErrNoBudget = errors.New("no budget set")

// SetBudget creates or replaces tenant's budget.
func (s *Service) SetBudget(ctx context.Context, b Budget) (Budget, error) {
	if b.LimitCents <= 0 || b.LimitCents > MaxGrantCents {
		return b, &FieldError{"limit_cents", fmt.Sprintf("must be 1..%d", MaxGrantCents)}
	}
	if b.Thresholds == nil {
		b.Thresholds = []int{50, 80, 100}
	}
	if len(b.Thresholds) == 0 || len(b.Thresholds) > 10 {
		return b, &FieldError{"thresholds", "must list 1..10 percentages"}
	}
	for i, t := range b.Thresholds {
		if t < 1 || t > 1000 || (i > 0 && t <= b.Thresholds[i-1]) {
			return b, &FieldError{"thresholds", "must be ascending percentages of 1..1000"}
		}
	}
	if b.HardStop == "" {
		b.HardStop = StopNone
	}
	if !slices.Contains([]string{StopNone, StopCreate, StopInstances}, b.HardStop) {
		return b, &FieldError{"hard_stop", fmt.Sprintf("%q is not one of none, block_create, stop_instances", b.HardStop)}
	}
	err := s.pool.QueryRow(ctx, `INSERT INTO billing_budgets (tenant_id, limit_cents, thresholds, hard_stop) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant_id) DO UPDATE SET limit_cents = excluded.limit_cents, thresholds = excluded.thresholds,
		    hard_stop = excluded.hard_stop, updated_at = now()
		RETURNING updated_at`, b.TenantID, b.LimitCents, b.Thresholds, b.HardStop).Scan(&b.UpdatedAt)
	if err != nil {
		return b, fmt.Errorf("credit: set budget: %w", err)
	}
	return b, nil
}

// GetBudget returns tenant's budget or ErrNoBudget.
func (s *Service) GetBudget(ctx context.Context, tenant uuid.UUID) (Budget, error) {
	b := Budget{TenantID: tenant}
	err := s.pool.QueryRow(ctx, `SELECT limit_cents, thresholds, hard_stop, updated_at FROM billing_budgets WHERE tenant_id = $1`, tenant).
		Scan(&b.LimitCents, &b.Thresholds, &b.HardStop, &b.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, ErrNoBudget
	}
	if err != nil {
		return b, fmt.Errorf("credit: budget: %w", err)
	}
	return b, nil
}

// Blocked reports whether tenant may not create instances now: its credit is exhausted (it had
// grants, and its balance is not positive) and its budget's hard stop says so.
func (s *Service) Blocked(ctx context.Context, tenant uuid.UUID, now time.Time) (bool, error) {
	var stop string
	err := s.pool.QueryRow(ctx, `SELECT hard_stop FROM billing_budgets WHERE tenant_id = $1`, tenant).Scan(&stop)
	if errors.Is(err, pgx.ErrNoRows) || stop == StopNone {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("credit: hard stop: %w", err)
	}
	return s.exhausted(ctx, tenant, now)
}

func (s *Service) exhausted(ctx context.Context, tenant uuid.UUID, now time.Time) (bool, error) {
	var grants int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM billing_credit_grants WHERE tenant_id = $1`, tenant).Scan(&grants); err != nil {
		return false, fmt.Errorf("credit: grants: %w", err)
	}
	if grants == 0 {
		return false, nil // a postpaid tenant: nothing to exhaust
	}
	b, err := s.Balance(ctx, tenant, now)
	if err != nil {
		return false, err
	}
	return b.BalanceCents <= 0, nil
}

// LowCreditPercent is when the credit warning fires: under this share of the credit granted left.
const LowCreditPercent = 20

// Evaluator checks budgets and credits and fires their alerts, each once: a budget threshold
// once per tenant and month, a credit warning once per tenant and total granted.
type Evaluator struct {
	svc *Service
	log *slog.Logger
	// Stop, when set, stops the running instances of a tenant whose credit is exhausted and
	// whose budget says stop_instances (the apiserver wires its store here).
	Stop func(ctx context.Context, tenant uuid.UUID) error
}

// NewEvaluator returns an evaluator.
func NewEvaluator(svc *Service, log *slog.Logger) *Evaluator {
	if log == nil {
		log = slog.Default()
	}
	return &Evaluator{svc: svc, log: log}
}

// Run checks every interval until ctx ends.
func (e *Evaluator) Run(ctx context.Context, interval time.Duration, now func() time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.Check(ctx, now()); err != nil && ctx.Err() == nil {
				e.log.Error("budget and credit check failed", "err", err)
			}
		}
	}
}

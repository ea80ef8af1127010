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

	"gpucloud/billing/webhook"
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

// Check evaluates every tenant with a budget or a grant at now.
func (e *Evaluator) Check(ctx context.Context, now time.Time) error {
	rows, err := e.svc.pool.Query(ctx, `SELECT tenant_id FROM billing_budgets UNION SELECT tenant_id FROM billing_credit_grants`)
	if err != nil {
		return fmt.Errorf("credit: evaluate: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("credit: evaluate: %w", err)
	}
	var errs []error
	for _, t := range tenants {
		if err := e.checkTenant(ctx, t, now); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

func (e *Evaluator) checkTenant(ctx context.Context, tenant uuid.UUID, now time.Time) error {
	bal, err := e.svc.Balance(ctx, tenant, now)
	if err != nil {
		return err
	}
	budget, err := e.svc.GetBudget(ctx, tenant)
	hasBudget := err == nil
	if err != nil && !errors.Is(err, ErrNoBudget) {
		return err
	}
	period := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	stop := false
	err = pgx.BeginFunc(ctx, e.svc.pool, func(tx pgx.Tx) error {
		if hasBudget {
			for _, th := range budget.Thresholds {
				if bal.MonthToDateCents*100 < budget.LimitCents*int64(th) {
					break
				}
				tag, err := tx.Exec(ctx, `INSERT INTO billing_budget_alerts (tenant_id, period, threshold, spent_cents)
					VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, tenant, period, th, bal.MonthToDateCents)
				if err != nil {
					return fmt.Errorf("budget alert: %w", err)
				}
				if tag.RowsAffected() == 1 {
					if err := webhook.Enqueue(ctx, tx, tenant, webhook.BudgetThreshold, now, map[string]any{
						"period": period.Format("2006-01"), "threshold_percent": th, "limit_cents": budget.LimitCents,
						"spent_cents": bal.MonthToDateCents}); err != nil {
						return err
					}
				}
			}
		}
		var granted int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount_cents), 0)::bigint FROM billing_credit_grants
			WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)`, tenant, now).Scan(&granted); err != nil {
			return fmt.Errorf("credit alert: %w", err)
		}
		if granted == 0 {
			return nil
		}
		for _, a := range []struct {
			kind string
			hit  bool
		}{{"low", bal.BalanceCents*100 < granted*LowCreditPercent}, {"exhausted", bal.BalanceCents <= 0}} {
			if !a.hit {
				continue
			}
			tag, err := tx.Exec(ctx, `INSERT INTO billing_credit_alerts (tenant_id, kind, granted) VALUES ($1, $2, $3)
				ON CONFLICT DO NOTHING`, tenant, a.kind, granted)
			if err != nil {
				return fmt.Errorf("credit alert: %w", err)
			}
			if tag.RowsAffected() == 1 {
				hardStop := StopNone
				if hasBudget {
					hardStop = budget.HardStop
				}
				if err := webhook.Enqueue(ctx, tx, tenant, webhook.CreditLow, now, map[string]any{
					"exhausted": a.kind == "exhausted", "balance_cents": bal.BalanceCents, "credit_cents": bal.CreditCents,
					"granted_cents": granted, "hard_stop": hardStop}); err != nil {
					return err
				}
			}
		}
		stop = hasBudget && budget.HardStop == StopInstances && bal.BalanceCents <= 0
		return nil
	})
	if err != nil {
		return err
	}
	if stop && e.Stop != nil {
		if err := e.Stop(ctx, tenant); err != nil {
			return fmt.Errorf("hard stop: %w", err)
		}
		e.log.Warn("credit exhausted: tenant's instances stopped", "tenant", tenant, "balance_cents", bal.BalanceCents)
	}
	return nil
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

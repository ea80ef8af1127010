package credit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/billing/rating"
	"gpucloud/billing/webhook"
)

// Check evaluates every tenant with a budget or a grant at now in one statement (checkSQL): each
// tenant's balance as Balance computes it, the budget thresholds and credit warnings crossed (each
// recorded once by its alert row's primary key, and queued as a webhook in the same statement),
// and the tenants whose instances a hard stop must stop. Concurrent checks (replicas) meet on the
// alert rows: one inserts, the others skip it, so each crossing fires one webhook.
func (e *Evaluator) Check(ctx context.Context, now time.Time) error {
	now = now.UTC().Truncate(time.Second)
	period := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	rows, err := e.svc.pool.Query(ctx, checkSQL, now, period, LowCreditPercent, now.Format(time.RFC3339Nano),
		webhook.BudgetThreshold, webhook.CreditLow)
	if err != nil {
		return fmt.Errorf("credit: evaluate: %w", err)
	}
	type stop struct {
		tenant  uuid.UUID
		balance int64
	}
	stops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stop, error) {
		var s stop
		return s, r.Scan(&s.tenant, &s.balance)
	})
	if err != nil {
		return fmt.Errorf("credit: evaluate: %w", err)
	}
	if e.Stop == nil {
		return nil
	}
	var errs []error
	for _, s := range stops {
		if err := e.Stop(ctx, s.tenant); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: hard stop: %w", s.tenant, err))
			continue
		}
		e.log.Warn("credit exhausted: tenant's instances stopped", "tenant", s.tenant, "balance_cents", s.balance)
	}
	return errors.Join(errs...)
}

// checkSQL: $1 now (whole seconds), $2 the first instant of now's month, $3 LowCreditPercent, $4
// now as the webhooks' "at", $5 and $6 the event types. Months and their bounds are computed in
// UTC (timestamp without time zone), whatever the session's time zone.
var checkSQL = `
WITH tenants AS (
    SELECT tenant_id FROM billing_budgets UNION SELECT tenant_id FROM billing_credit_grants
),
credit AS (
    SELECT tenant_id,
        coalesce(sum(remaining_cents) FILTER (WHERE expires_at IS NULL OR expires_at > $1), 0)::bigint AS credit,
        coalesce(sum(amount_cents) FILTER (WHERE expires_at IS NULL OR expires_at > $1), 0)::bigint AS granted
    FROM billing_credit_grants GROUP BY tenant_id
),
-- Unbilled: from the month after the last closed invoice (or the first thing held) up to now.
starts AS (
    SELECT t.tenant_id, greatest(
        (SELECT max(i.period) + interval '1 month' FROM billing_invoices i WHERE i.tenant_id = t.tenant_id AND i.status = 'closed'),
        (SELECT date_trunc('month', min(a.started_at), 'UTC') AT TIME ZONE 'UTC' FROM billing_allocations a WHERE a.tenant_id = t.tenant_id)
    ) AS first_month
    FROM tenants t
),
months AS (
    SELECT s.tenant_id, m AT TIME ZONE 'UTC' AS m_start, (m + interval '1 month') AT TIME ZONE 'UTC' AS m_end
    FROM starts s, generate_series(s.first_month, $1::timestamptz AT TIME ZONE 'UTC', interval '1 month') AS m
    WHERE m AT TIME ZONE 'UTC' < $1
),
` + rating.HeldPiecesOver(rating.Window{
	From:  "months mo JOIN billing_allocations a ON a.tenant_id = mo.tenant_id",
	Where: "true", Lo: "mo.m_start", Hi: "mo.m_end", Now: "$1", Carry: "mo.m_start",
}) + `,
-- Priced lines per tenant and month, each rounded to the cent as rating.RateRange rounds them.
lines AS (
    SELECT tenant_id, w AS m_start,
        round(sum(quantity * ms)::numeric * price / min(` + rating.UnitMsHeld + `) / 10000)::bigint AS cents
    FROM pieces
    GROUP BY tenant_id, w, kind, tier, gpu_model, instance_type, price_id, price
),
spend AS (
    SELECT tenant_id, sum(cents)::bigint AS unbilled, coalesce(sum(cents) FILTER (WHERE m_start = $2), 0)::bigint AS month_to_date
    FROM lines GROUP BY tenant_id
),
state AS MATERIALIZED (
    SELECT t.tenant_id, coalesce(c.credit, 0) AS credit, coalesce(c.granted, 0) AS granted,
        coalesce(s.month_to_date, 0) AS month_to_date, coalesce(c.credit, 0) - coalesce(s.unbilled, 0) AS balance,
        b.limit_cents, b.thresholds, coalesce(b.hard_stop, 'none') AS hard_stop
    FROM tenants t LEFT JOIN credit c USING (tenant_id) LEFT JOIN spend s USING (tenant_id)
        LEFT JOIN billing_budgets b USING (tenant_id)
),
budget_fired AS (
    INSERT INTO billing_budget_alerts (tenant_id, period, threshold, spent_cents)
    SELECT st.tenant_id, $2::date, th, st.month_to_date
    FROM state st, unnest(st.thresholds) AS th
    WHERE st.limit_cents IS NOT NULL AND st.month_to_date * 100 >= st.limit_cents * th
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, threshold, spent_cents
),
credit_fired AS (
    INSERT INTO billing_credit_alerts (tenant_id, kind, granted)
    SELECT st.tenant_id, k.kind, st.granted
    FROM state st, LATERAL (VALUES ('low', st.balance * 100 < st.granted * $3), ('exhausted', st.balance <= 0)) AS k(kind, hit)
    WHERE st.granted > 0 AND k.hit
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, kind
),
-- One event (one id) per alert fired, queued for every live endpoint subscribed to it, with the
-- envelope webhook.Enqueue writes.
events AS (
    SELECT gen_random_uuid() AS id, f.tenant_id, $5::text AS type, jsonb_build_object(
        'period', to_char($2::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM'), 'threshold_percent', f.threshold,
        'limit_cents', st.limit_cents, 'spent_cents', f.spent_cents) AS data
    FROM budget_fired f JOIN state st USING (tenant_id)
    UNION ALL
    SELECT gen_random_uuid(), f.tenant_id, $6::text, jsonb_build_object(
        'exhausted', f.kind = 'exhausted', 'balance_cents', st.balance, 'credit_cents', st.credit,
        'granted_cents', st.granted, 'hard_stop', st.hard_stop)
    FROM credit_fired f JOIN state st USING (tenant_id)
),
queued AS (
    INSERT INTO billing_webhook_deliveries (webhook_id, tenant_id, event_id, event_type, payload)
    SELECT w.id, ev.tenant_id, ev.id, ev.type,
        jsonb_build_object('id', ev.id, 'type', ev.type, 'tenant_id', ev.tenant_id, 'at', $4::text, 'data', ev.data)
    FROM events ev JOIN billing_webhooks w
        ON w.deleted_at IS NULL AND (w.tenant_id = ev.tenant_id OR w.tenant_id IS NULL) AND ev.type = ANY (w.events)
)
SELECT tenant_id, balance FROM state
WHERE hard_stop = 'stop_instances' AND granted > 0 AND balance <= 0
ORDER BY tenant_id`

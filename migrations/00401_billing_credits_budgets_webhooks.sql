-- +goose Up
-- Prepaid credits, budgets with threshold alerts, tenant and finance webhooks, and durable jobs
-- that close every tenant's month.

-- A credit grant: prepaid money a tenant's invoices draw on at close, in priority order (lower
-- first), then earliest expiry first. remaining_cents only decreases, by invoice closes.
CREATE TABLE billing_credit_grants (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       uuid        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    remaining_cents bigint      NOT NULL CHECK (remaining_cents >= 0 AND remaining_cents <= amount_cents),
    priority        integer     NOT NULL DEFAULT 100 CHECK (priority BETWEEN 0 AND 1000),
    expires_at      timestamptz,
    note            text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX billing_credit_grants_tenant ON billing_credit_grants (tenant_id, priority, expires_at);

-- What each closed invoice drew from which grant.
CREATE TABLE billing_credit_applications (
    invoice_id   uuid   NOT NULL REFERENCES billing_invoices (id),
    grant_id     uuid   NOT NULL REFERENCES billing_credit_grants (id),
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    PRIMARY KEY (invoice_id, grant_id)
);
ALTER TABLE billing_invoices ADD COLUMN credit_cents bigint NOT NULL DEFAULT 0 CHECK (credit_cents >= 0);

-- A tenant's monthly budget: alerts at each threshold (percent of limit_cents) of the month's
-- charges so far; hard_stop acts when the tenant's prepaid credit is exhausted.
CREATE TABLE billing_budgets (
    tenant_id   uuid        PRIMARY KEY,
    limit_cents bigint      NOT NULL CHECK (limit_cents > 0),
    thresholds  integer[]   NOT NULL DEFAULT '{50,80,100}',
    hard_stop   text        NOT NULL DEFAULT 'none' CHECK (hard_stop IN ('none', 'block_create', 'stop_instances')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per (tenant, month, threshold) crossed: the primary key makes each alert fire once.
CREATE TABLE billing_budget_alerts (
    tenant_id   uuid        NOT NULL,
    period      date        NOT NULL,
    threshold   integer     NOT NULL,
    spent_cents bigint      NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, period, threshold)
);

-- Credit warnings and exhaustion, once per grant state: 'low' (under 20% left) and 'exhausted'.
CREATE TABLE billing_credit_alerts (
    tenant_id uuid        NOT NULL,
    kind      text        NOT NULL CHECK (kind IN ('low', 'exhausted')),
    -- The sum of the tenant's grants when it fired: a new grant re-arms the alert.
    granted   bigint      NOT NULL,
    fired_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, kind, granted)
);

-- Webhook endpoints: a tenant's (tenant_id set: its own events) or finance's (NULL: every tenant's).
CREATE TABLE billing_webhooks (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid,
    url        text        NOT NULL,
    secret     text        NOT NULL,
    events     text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
CREATE INDEX billing_webhooks_tenant ON billing_webhooks (tenant_id) WHERE deleted_at IS NULL;

-- The delivery queue and its log: one row per event and endpoint, enqueued in the transaction of
-- the change it reports, sent by whichever replica locks it (FOR UPDATE SKIP LOCKED).
CREATE TABLE billing_webhook_deliveries (
    id              bigserial   PRIMARY KEY,
    webhook_id      uuid        NOT NULL REFERENCES billing_webhooks (id),
    tenant_id       uuid,
    event_id        uuid        NOT NULL,
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_status     integer     NOT NULL DEFAULT 0,
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX billing_webhook_deliveries_due ON billing_webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX billing_webhook_deliveries_webhook ON billing_webhook_deliveries (webhook_id, id);

-- Closing a month for every tenant: one durable job per period; a crashed replica's job is
-- taken over when its lease lapses, and tenants already closed are skipped.
CREATE TABLE billing_close_jobs (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    period      date        NOT NULL CHECK (period = date_trunc('month', period)),
    status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    closed      integer     NOT NULL DEFAULT 0,
    skipped     integer     NOT NULL DEFAULT 0,
    failed      integer     NOT NULL DEFAULT 0,
    last_error  text        NOT NULL DEFAULT '',
    lease_until timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE UNIQUE INDEX billing_close_jobs_running ON billing_close_jobs (period) WHERE status = 'running';

-- +goose Down
DROP TABLE billing_close_jobs;
DROP TABLE billing_webhook_deliveries;
DROP TABLE billing_webhooks;
DROP TABLE billing_credit_alerts;
DROP TABLE billing_budget_alerts;
DROP TABLE billing_budgets;
ALTER TABLE billing_invoices DROP COLUMN credit_cents;
DROP TABLE billing_credit_applications;
DROP TABLE billing_credit_grants;

-- +goose Up
-- Billing: raw usage (exactly once by id), hourly rollups, price book, invoices.
-- tenant_id is a plain uuid on purpose: billing keeps its own records even if a tenant row goes.

-- Raw usage records, one row per accepted record; the primary key is what makes ingestion
-- exactly once. Quantities derived at ingestion: duration_ms (end - start, both truncated to ms).
CREATE TABLE billing_usage_records (
    id                text        PRIMARY KEY,
    kind              text        NOT NULL CHECK (kind IN ('gpu', 'vm')),
    source            text        NOT NULL,
    tenant_id         uuid        NOT NULL,
    instance_id       text        NOT NULL,
    session_id        text        NOT NULL DEFAULT '',
    start_at          timestamptz NOT NULL,
    end_at            timestamptz NOT NULL CHECK (end_at > start_at),
    gpu_model         text        NOT NULL DEFAULT '',
    tier              text        NOT NULL DEFAULT '',
    gpu_count         integer     NOT NULL DEFAULT 0,
    memory_quota      bigint      NOT NULL DEFAULT 0,
    memory_peak_bytes bigint      NOT NULL DEFAULT 0,
    memory_avg_bytes  bigint      NOT NULL DEFAULT 0,
    bytes_moved       bigint      NOT NULL DEFAULT 0,
    instance_type     text        NOT NULL DEFAULT '',
    vcpus             integer     NOT NULL DEFAULT 0,
    memory_mib        integer     NOT NULL DEFAULT 0,
    -- booked_period is the month the record is billed in: its own month, or the first open
    -- month after it when that month was already closed (then adjustment is true).
    booked_period     date        NOT NULL,
    adjustment        boolean     NOT NULL DEFAULT false,
    ingested_at       timestamptz NOT NULL DEFAULT now()
)
-- Append-only: vacuuming it for inserts only sets visibility bits nothing here uses, and costs
-- a full pass over a large table every few million records.
WITH (autovacuum_vacuum_insert_threshold = -1);
-- No secondary index: ingestion speed matters more; everything else reads the rollups.

-- Hourly rollups: the records' intervals split at hour boundaries and summed (see
-- billing_usage_pending for how they are maintained). Reports and invoices read only this table.
-- Dimensions that do not apply to a kind are '' (never NULL) so the unique key works.
CREATE TABLE billing_usage_hourly (
    tenant_id     uuid        NOT NULL,
    booked_period date        NOT NULL,
    adjustment    boolean     NOT NULL,
    hour          timestamptz NOT NULL,
    kind          text        NOT NULL,
    tier          text        NOT NULL,
    gpu_model     text        NOT NULL,
    instance_type text        NOT NULL,
    -- gpu_ms: GPU-milliseconds held (gpu_count x ms), for gpu records.
    gpu_ms        bigint      NOT NULL DEFAULT 0,
    -- quota_mib_ms: memory quota MiB x gpu_count x ms, the slice measure shared sessions pay by.
    quota_mib_ms  bigint      NOT NULL DEFAULT 0,
    -- vm_ms: VM-milliseconds, for vm records.
    vm_ms         bigint      NOT NULL DEFAULT 0,
    records       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type)
)
-- Rollup rows are updated in place by every flush: free space on each page lets those updates
-- be HOT (no new index entries).
WITH (fillfactor = 70);
CREATE INDEX billing_usage_hourly_hour ON billing_usage_hourly (hour);

-- Usage ingested but not yet added to the hourly rollups: each batch appends its records split
-- by hour and summed (cheap: no index), and the rollup flush moves everything here into
-- billing_usage_hourly in one statement. A batch of 1,000 records touches up to ~1,000 rollup keys;
-- a flush of many batches of the same hours touches each key once. Reports and period closing
-- flush first, so they never miss pending usage.
CREATE TABLE billing_usage_pending (
    tenant_id     uuid        NOT NULL,
    booked_period date        NOT NULL,
    adjustment    boolean     NOT NULL,
    hour          timestamptz NOT NULL,
    kind          text        NOT NULL,
    tier          text        NOT NULL,
    gpu_model     text        NOT NULL,
    instance_type text        NOT NULL,
    gpu_ms        bigint      NOT NULL,
    quota_mib_ms  bigint      NOT NULL,
    vm_ms         bigint      NOT NULL,
    records       bigint      NOT NULL
);

-- Price book. unit_price_micros is in millionths of the currency unit per unit-hour:
--   gpu dedicated: per GPU-hour;  gpu shared: per GiB-hour of memory quota (the slice price);
--   vm: per VM-hour of the instance type.
-- effective_from is a whole hour, so each hourly rollup has exactly one price in force.
CREATE TABLE billing_prices (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind              text        NOT NULL CHECK (kind IN ('gpu', 'vm')),
    gpu_model         text        NOT NULL DEFAULT '',
    tier              text        NOT NULL DEFAULT '',
    instance_type     text        NOT NULL DEFAULT '',
    unit_price_micros bigint      NOT NULL CHECK (unit_price_micros >= 0),
    currency          text        NOT NULL DEFAULT 'USD',
    effective_from    timestamptz NOT NULL CHECK (effective_from = date_trunc('hour', effective_from)),
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, gpu_model, tier, instance_type, effective_from)
);

-- Invoices: one per tenant and closed month. Rows are inserted as 'draft' with their lines and
-- turned 'closed' in the same transaction; a closed invoice and its lines never change again.
CREATE TABLE billing_invoices (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid        NOT NULL,
    period      date        NOT NULL CHECK (period = date_trunc('month', period)),
    status      text        NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'closed')),
    currency    text        NOT NULL DEFAULT 'USD',
    total_cents bigint      NOT NULL DEFAULT 0,
    closed_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, period)
);

CREATE TABLE billing_invoice_lines (
    invoice_id        uuid    NOT NULL REFERENCES billing_invoices (id),
    line_no           integer NOT NULL,
    description       text    NOT NULL,
    kind              text    NOT NULL,
    tier              text    NOT NULL,
    gpu_model         text    NOT NULL,
    instance_type     text    NOT NULL,
    usage_period      date    NOT NULL, -- the month the usage happened (differs for adjustments)
    adjustment        boolean NOT NULL,
    quantity_ms       bigint  NOT NULL, -- unit-milliseconds (GPU-ms, GiB-ms, VM-ms)
    unit              text    NOT NULL, -- gpu-hour, gib-hour, vm-hour
    unit_price_micros bigint  NOT NULL,
    price_id          uuid    NOT NULL,
    amount_cents      bigint  NOT NULL,
    PRIMARY KEY (invoice_id, line_no)
);

-- +goose StatementBegin
CREATE FUNCTION billing_invoice_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    line_sum bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status = 'closed' THEN
            RAISE EXCEPTION 'invoice % is closed and cannot be deleted', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status = 'closed' THEN
        RAISE EXCEPTION 'invoice % is closed and cannot be changed', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.status = 'closed' THEN
        SELECT coalesce(sum(amount_cents), 0) INTO line_sum FROM billing_invoice_lines WHERE invoice_id = NEW.id;
        IF line_sum <> NEW.total_cents THEN
            RAISE EXCEPTION 'invoice % total % does not equal the sum of its lines %', NEW.id, NEW.total_cents, line_sum
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION billing_invoice_line_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT status INTO st FROM billing_invoices WHERE id = NEW.invoice_id;
    ELSE
        SELECT status INTO st FROM billing_invoices WHERE id = OLD.invoice_id;
    END IF;
    IF st = 'closed' THEN
        RAISE EXCEPTION 'lines of a closed invoice cannot be changed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION billing_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% cannot be truncated: invoices are permanent', TG_TABLE_NAME USING ERRCODE = 'check_violation';
END $$;
-- +goose StatementEnd

CREATE TRIGGER billing_invoices_guard BEFORE UPDATE OR DELETE ON billing_invoices
    FOR EACH ROW EXECUTE FUNCTION billing_invoice_guard();
CREATE TRIGGER billing_invoice_lines_guard BEFORE INSERT OR UPDATE OR DELETE ON billing_invoice_lines
    FOR EACH ROW EXECUTE FUNCTION billing_invoice_line_guard();
CREATE TRIGGER billing_invoices_no_truncate BEFORE TRUNCATE ON billing_invoices
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();
CREATE TRIGGER billing_invoice_lines_no_truncate BEFORE TRUNCATE ON billing_invoice_lines
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_truncate();

-- +goose Down
DROP TABLE billing_invoice_lines;
DROP TABLE billing_invoices;
DROP FUNCTION billing_refuse_truncate();
DROP FUNCTION billing_invoice_line_guard();
DROP FUNCTION billing_invoice_guard();
DROP TABLE billing_prices;
DROP TABLE billing_usage_pending;
DROP TABLE billing_usage_hourly;
DROP TABLE billing_usage_records;

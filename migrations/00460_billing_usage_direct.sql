-- +goose Up
-- Rollup pieces of batches that do not compress (records spread over many tenants: about one
-- rollup key per record), appended as they come: an upsert into billing_usage_hourly costs a
-- conflict check, a speculative insert and a wide unique key per piece, and parking such pieces
-- in billing_usage_pending buys nothing (the flush would upsert as many rows). Keys may repeat
-- here and across both tables: readers sum over billing_usage_rollups, never expect one row per
-- key. Batches that compress keep to the pending table and the flush.
CREATE TABLE billing_usage_direct (
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
)
-- Append-only, as billing_usage_records.
WITH (autovacuum_vacuum_insert_threshold = -1);
-- Tenants' months (periods, the close-all job's tenant list, a tenant's usage) and hour ranges
-- (reports), as the hourly rollups' primary key and hour index serve them.
CREATE INDEX billing_usage_direct_tenant ON billing_usage_direct (tenant_id, booked_period);
CREATE INDEX billing_usage_direct_hour ON billing_usage_direct (hour);

-- Everything rolled up: what reports, periods and closes read.
CREATE VIEW billing_usage_rollups AS
    SELECT tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type,
        gpu_ms, quota_mib_ms, vm_ms, records
    FROM billing_usage_hourly
    UNION ALL
    SELECT tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type,
        gpu_ms, quota_mib_ms, vm_ms, records
    FROM billing_usage_direct;

-- +goose Down
DROP VIEW billing_usage_rollups;
DROP TABLE billing_usage_direct;

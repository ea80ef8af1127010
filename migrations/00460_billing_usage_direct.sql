-- +goose Up
-- Rollup pieces of batches that do not compress (records spread over many tenants: about one
-- rollup key per record), appended as they come: an upsert into billing_usage_hourly costs a
-- conflict check, a speculative insert and a wide unique key per piece, and parking such pieces
-- in billing_usage_pending buys nothing (the flush would upsert as many rows). Keys may repeat
-- here and across both tables: readers sum, never expect one row per key.
--
-- A child of billing_usage_hourly (inheritance): every reader of billing_usage_hourly reads these
-- rows too, unchanged, and the planner estimates over both from the parent's inherited statistics
-- (a UNION ALL view has none: the per-tier report's plan went from hash to sort aggregates, 3x
-- slower). Indexes and the primary key are not inherited: the flush's ON CONFLICT upserts only
-- the parent's rows, and this table takes appends without a uniqueness check.
CREATE TABLE billing_usage_direct () INHERITS (billing_usage_hourly)
-- Append-only, as billing_usage_records.
WITH (autovacuum_vacuum_insert_threshold = -1);
-- Tenants' months (periods, the close-all job's tenant list, a tenant's usage) and hour ranges
-- (reports), as the parent's primary key and hour index serve them: scans of the parent become
-- merge appends over both.
CREATE INDEX billing_usage_direct_tenant ON billing_usage_direct (tenant_id, booked_period);
CREATE INDEX billing_usage_direct_hour ON billing_usage_direct (hour);

-- +goose Down
DROP TABLE billing_usage_direct;

-- +goose Up
-- Which tenants have usage booked in which month: one row per (tenant, booked period), written by
-- ingestion in the same transaction as the records the first time a pair appears (a pair is never
-- removed). The periods list and the close-all job read it instead of probing the rollups for
-- distinct prefixes, and so billing_usage_direct needs no tenant index: at 10,000 tenants its
-- random-order inserts were a quarter of PostgreSQL's ingestion work (docs/benchmarks/billing-ingest.md).
CREATE TABLE billing_usage_months (
    tenant_id     uuid NOT NULL,
    booked_period date NOT NULL,
    PRIMARY KEY (tenant_id, booked_period)
);
CREATE INDEX billing_usage_months_period ON billing_usage_months (booked_period, tenant_id);
INSERT INTO billing_usage_months (tenant_id, booked_period)
SELECT DISTINCT tenant_id, booked_period FROM billing_usage_hourly
UNION SELECT DISTINCT tenant_id, booked_period FROM billing_usage_pending;

-- Spread batches' pieces are read by hour range (reports) or whole (a tenant's usage, by its hour
-- range): a block-range index on hour suits rows that arrive roughly in time order, and costs
-- almost nothing per insert, where the b-tree on hour cost ~1.5 us of PostgreSQL's time per piece.
DROP INDEX billing_usage_direct_tenant;
DROP INDEX billing_usage_direct_hour;
CREATE INDEX billing_usage_direct_hour ON billing_usage_direct USING brin (hour) WITH (autosummarize = on);

-- +goose Down
DROP INDEX billing_usage_direct_hour;
CREATE INDEX billing_usage_direct_hour ON billing_usage_direct (hour);
CREATE INDEX billing_usage_direct_tenant ON billing_usage_direct (tenant_id, booked_period);
DROP TABLE billing_usage_months;

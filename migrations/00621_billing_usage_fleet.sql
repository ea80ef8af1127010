-- +goose Up
-- The hourly rollups summed over tenants: what finance's per-tier and per-GPU-model reports read.
-- A month is a few thousand rows here (hours x kinds, tiers, models, instance types) against
-- hundreds of thousands to millions in billing_usage_hourly and its child billing_usage_direct.
-- Every batch appends its pieces summed over its tenants to billing_usage_fleet_pending (a
-- handful of rows, no key: concurrent batches never wait on each other), in the transaction that
-- stores its records; the rollup flush folds them in here, so both tables count a record exactly
-- when the other does (after a flush).
CREATE TABLE billing_usage_fleet (
    hour          timestamptz NOT NULL,
    kind          text        NOT NULL,
    tier          text        NOT NULL,
    gpu_model     text        NOT NULL,
    instance_type text        NOT NULL,
    gpu_ms        bigint      NOT NULL DEFAULT 0,
    quota_mib_ms  bigint      NOT NULL DEFAULT 0,
    vm_ms         bigint      NOT NULL DEFAULT 0,
    records       bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, kind, tier, gpu_model, instance_type)
)
-- Updated in place by every flush, as billing_usage_hourly.
WITH (fillfactor = 70);

CREATE TABLE billing_usage_fleet_pending (
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

-- Usage stored before this migration: the rollups (with their child) and what still waits in
-- billing_usage_pending (its fleet share was never appended, so it is counted here).
INSERT INTO billing_usage_fleet (hour, kind, tier, gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records)
SELECT hour, kind, tier, gpu_model, instance_type, sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records)
FROM (SELECT hour, kind, tier, gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records FROM billing_usage_hourly
      UNION ALL
      SELECT hour, kind, tier, gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records FROM billing_usage_pending) u
GROUP BY hour, kind, tier, gpu_model, instance_type;

-- +goose Down
DROP TABLE billing_usage_fleet_pending;
DROP TABLE billing_usage_fleet;

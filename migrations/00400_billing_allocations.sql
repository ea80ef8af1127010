-- +goose Up
-- Allocation-based charges: what a tenant holds, from the control plane's own state transitions.
-- A row is one interval during which an instance held one resource: written in the same
-- transaction as the state transition that starts it, closed (ended_at) in the one that ends it.
-- Rating prices these intervals by the second; gpuserverd's and hostd's usage records stay as
-- utilisation (billing_usage_*), never charged.
CREATE TABLE billing_allocations (
    id            bigserial   PRIMARY KEY,
    tenant_id     uuid        NOT NULL,
    instance_id   uuid        NOT NULL,
    -- gpu: the GPUs (dedicated) or slices (shared) of a running instance; vm: the running VM;
    -- storage: a disk that exists (an instance's root disk, or a volume), running or stopped.
    kind          text        NOT NULL CHECK (kind IN ('gpu', 'vm', 'storage')),
    -- What is held: the instance id for its GPUs, VM and root disk ("<id>/root"); a volume's id
    -- for a volume. At most one open interval per kind and resource (the index below), so a
    -- transition replayed after a crash cannot open a second one.
    resource_id   text        NOT NULL,
    -- The instance's dimensions, for reports; rating keys prices by the kind's own ones
    -- (gpu: gpu_model and tier; vm: instance_type; storage: none).
    tier          text        NOT NULL DEFAULT '',
    gpu_model     text        NOT NULL DEFAULT '',
    instance_type text        NOT NULL DEFAULT '',
    -- Units held: gpu dedicated: GPUs; gpu shared: MiB of memory quota (all GPUs); vm: 1;
    -- storage: MiB (GiB x 1024, so a GiB-hour is MiB-ms / 3,686,400,000 for slices and disks alike).
    quantity      bigint      NOT NULL CHECK (quantity > 0),
    started_at    timestamptz NOT NULL CHECK (started_at = date_trunc('second', started_at)),
    ended_at      timestamptz CHECK (ended_at = date_trunc('second', ended_at) AND ended_at >= started_at)
);
CREATE UNIQUE INDEX billing_allocations_open ON billing_allocations (kind, resource_id) WHERE ended_at IS NULL;
CREATE INDEX billing_allocations_tenant ON billing_allocations (tenant_id, started_at);
CREATE INDEX billing_allocations_instance ON billing_allocations (instance_id);

-- Storage has a price per GiB-hour (no key); gpu and vm keep theirs.
ALTER TABLE billing_prices DROP CONSTRAINT billing_prices_kind_check;
ALTER TABLE billing_prices ADD CONSTRAINT billing_prices_kind_check CHECK (kind IN ('gpu', 'vm', 'storage'));

-- +goose Down
ALTER TABLE billing_prices DROP CONSTRAINT billing_prices_kind_check;
ALTER TABLE billing_prices ADD CONSTRAINT billing_prices_kind_check CHECK (kind IN ('gpu', 'vm'));
DROP TABLE billing_allocations;

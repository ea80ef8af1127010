-- +goose Up
-- Volumes: a tenant's disks that outlive instances. A volume lives in one host's storage pool
-- (host_id, fixed at its first attach: the pool is host-local) and is attached to at most one
-- instance at a time. Deleting an instance detaches its volumes; only deleting the volume itself
-- deletes its data. Quotas count volumes and their GiB per tenant, kept in step in the same
-- transactions as the volumes, like the instance quotas.
ALTER TABLE tenants
    ADD COLUMN quota_volumes    integer NOT NULL DEFAULT 10   CHECK (quota_volumes >= 0),
    ADD COLUMN quota_volume_gib integer NOT NULL DEFAULT 1000 CHECK (quota_volume_gib >= 0),
    ADD COLUMN used_volumes     integer NOT NULL DEFAULT 0    CHECK (used_volumes >= 0),
    ADD COLUMN used_volume_gib  integer NOT NULL DEFAULT 0    CHECK (used_volume_gib >= 0);

CREATE TABLE volumes (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    size_gib    integer NOT NULL CHECK (size_gib BETWEEN 1 AND 16384),
    host_id     uuid REFERENCES hosts (id),
    instance_id uuid REFERENCES instances (id),
    -- The guest disk (vdb..vdi) while attached: kept per attachment so a restart does not
    -- reorder a VM's disks.
    device      text NOT NULL DEFAULT '' CHECK (device = '' OR device ~ '^vd[b-i]$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz,
    -- Attached implies placed; a deleted volume is attached to nothing.
    CHECK (instance_id IS NULL OR host_id IS NOT NULL),
    CHECK (deleted_at IS NULL OR instance_id IS NULL),
    CHECK ((instance_id IS NULL) = (device = ''))
);
CREATE INDEX volumes_tenant ON volumes (tenant_id, id) WHERE deleted_at IS NULL;
CREATE INDEX volumes_host ON volumes (host_id) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX volumes_instance_device ON volumes (instance_id, device) WHERE instance_id IS NOT NULL;

-- +goose Down
DROP TABLE volumes;
ALTER TABLE tenants DROP COLUMN used_volume_gib, DROP COLUMN used_volumes, DROP COLUMN quota_volume_gib,
    DROP COLUMN quota_volumes;

-- +goose Up
-- The control plane: tenants, users, API keys, catalog, hosts, GPU servers, GPUs, instances,
-- reservations, events, audit log and idempotency records. Ids are UUIDv7 made by the apiserver,
-- so ordering by id is ordering by creation (cursor pagination relies on it).

CREATE TABLE tenants (
    id                     uuid PRIMARY KEY,
    name                   text NOT NULL UNIQUE,
    -- InfiniBand partition of the tenant (0x0001-0x7fff).
    partition_key          integer NOT NULL UNIQUE CHECK (partition_key BETWEEN 1 AND 32767),
    quota_instances        integer NOT NULL CHECK (quota_instances >= 0),
    quota_gpus             integer NOT NULL CHECK (quota_gpus >= 0),
    quota_gpu_memory_bytes bigint  NOT NULL CHECK (quota_gpu_memory_bytes >= 0),
    -- Usage counters, kept in step with instances in the same transactions. The checks make an
    -- oversubscribed quota impossible even if code got it wrong.
    used_instances         integer NOT NULL DEFAULT 0 CHECK (used_instances >= 0),
    used_gpus              integer NOT NULL DEFAULT 0 CHECK (used_gpus >= 0),
    used_gpu_memory_bytes  bigint  NOT NULL DEFAULT 0 CHECK (used_gpu_memory_bytes >= 0),
    created_at             timestamptz NOT NULL DEFAULT now()
);
CREATE SEQUENCE tenant_partition_keys MINVALUE 1 MAXVALUE 32767;

CREATE TABLE users (
    id         uuid PRIMARY KEY,
    tenant_id  uuid REFERENCES tenants (id),
    email      text NOT NULL UNIQUE,
    role       text NOT NULL CHECK (role IN ('tenant-admin', 'tenant-member', 'operator', 'finance')),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Tenant roles belong to a tenant; platform roles to none.
    CHECK ((role IN ('tenant-admin', 'tenant-member')) = (tenant_id IS NOT NULL))
);
CREATE INDEX users_tenant ON users (tenant_id, id);

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY,
    user_id      uuid NOT NULL REFERENCES users (id),
    name         text NOT NULL DEFAULT '',
    -- The first characters of the key, shown in lists so a user can tell keys apart.
    prefix       text NOT NULL,
    -- SHA-256 of the key: keys are random and high-entropy, so a fast hash is enough and keeps
    -- authentication cheap on every request.
    hash         bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_user ON api_keys (user_id, id);

CREATE TABLE gpu_models (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    memory_bytes bigint NOT NULL CHECK (memory_bytes > 0),
    -- A GPU whose NVML product name contains this string is of this model.
    nvml_match   text NOT NULL UNIQUE CHECK (nvml_match <> ''),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tiers (
    name               text PRIMARY KEY CHECK (name IN ('dedicated', 'shared')),
    -- GPU memory a shared instance gets per GPU; NULL for dedicated (the whole GPU).
    memory_slice_bytes bigint CHECK (memory_slice_bytes > 0),
    CHECK ((name = 'shared') = (memory_slice_bytes IS NOT NULL))
);
INSERT INTO tiers (name, memory_slice_bytes) VALUES ('dedicated', NULL), ('shared', 10737418240);

CREATE TABLE instance_types (
    id             uuid PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    vcpus          integer NOT NULL CHECK (vcpus > 0),
    memory_mib     integer NOT NULL CHECK (memory_mib > 0),
    disk_gib       integer NOT NULL CHECK (disk_gib > 0),
    gpu_model_id   uuid REFERENCES gpu_models (id),
    gpu_count      integer NOT NULL DEFAULT 0 CHECK (gpu_count >= 0),
    tier           text NOT NULL REFERENCES tiers (name),
    -- Money is integer minor units (cents) of currency, never floats.
    price_per_hour bigint NOT NULL CHECK (price_per_hour >= 0),
    currency       text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((gpu_count = 0) = (gpu_model_id IS NULL))
);

CREATE TABLE hosts (
    id                uuid PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    credential_hash   bytea NOT NULL UNIQUE,
    hostname          text NOT NULL DEFAULT '',
    hypervisor        text NOT NULL DEFAULT '',
    version           text NOT NULL DEFAULT '',
    vcpus             integer NOT NULL DEFAULT 0 CHECK (vcpus >= 0),
    memory_mib        integer NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    disk_gib          integer NOT NULL DEFAULT 0 CHECK (disk_gib >= 0),
    infiniband_vfs    integer NOT NULL DEFAULT 0 CHECK (infiniband_vfs >= 0),
    used_vcpus        integer NOT NULL DEFAULT 0 CHECK (used_vcpus >= 0),
    used_memory_mib   integer NOT NULL DEFAULT 0 CHECK (used_memory_mib >= 0),
    used_disk_gib     integer NOT NULL DEFAULT 0 CHECK (used_disk_gib >= 0),
    -- registered: created, never heard from; ready: heartbeating; unreachable: silent too long.
    status            text NOT NULL DEFAULT 'registered' CHECK (status IN ('registered', 'ready', 'unreachable')),
    cordoned          boolean NOT NULL DEFAULT false,
    draining          boolean NOT NULL DEFAULT false,
    last_heartbeat_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at        timestamptz
);

CREATE TABLE gpu_servers (
    id                uuid PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    credential_hash   bytea NOT NULL UNIQUE,
    hostname          text NOT NULL DEFAULT '',
    endpoint          text NOT NULL DEFAULT '',
    backend           text NOT NULL DEFAULT '',
    version           text NOT NULL DEFAULT '',
    active_sessions   integer NOT NULL DEFAULT 0,
    status            text NOT NULL DEFAULT 'registered' CHECK (status IN ('registered', 'ready', 'unreachable')),
    cordoned          boolean NOT NULL DEFAULT false,
    draining          boolean NOT NULL DEFAULT false,
    last_heartbeat_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at        timestamptz
);

CREATE TABLE gpus (
    id             uuid PRIMARY KEY,
    gpu_server_id  uuid NOT NULL REFERENCES gpu_servers (id),
    uuid           text NOT NULL UNIQUE,
    idx            integer NOT NULL,
    name           text NOT NULL,
    gpu_model_id   uuid REFERENCES gpu_models (id),
    memory_bytes   bigint NOT NULL CHECK (memory_bytes > 0),
    pci_bus_id     text NOT NULL DEFAULT '',
    healthy        boolean NOT NULL DEFAULT true,
    -- Memory promised to instances. A dedicated reservation takes all of it, a shared one a
    -- slice; the check is the last line against oversubscription.
    reserved_bytes bigint NOT NULL DEFAULT 0,
    CHECK (reserved_bytes BETWEEN 0 AND memory_bytes)
);
CREATE INDEX gpus_free ON gpus (gpu_model_id, gpu_server_id) WHERE healthy;

CREATE TABLE instances (
    id                         uuid PRIMARY KEY,
    tenant_id                  uuid NOT NULL REFERENCES tenants (id),
    name                       text NOT NULL,
    instance_type_id           uuid NOT NULL REFERENCES instance_types (id),
    image                      text NOT NULL,
    ssh_key                    text NOT NULL DEFAULT '',
    state                      text NOT NULL CHECK (state IN ('pending', 'provisioning', 'running', 'stopping', 'stopped', 'deleting', 'deleted', 'failed')),
    desired_state              text NOT NULL CHECK (desired_state IN ('running', 'stopped', 'deleted')),
    failure_reason             text NOT NULL DEFAULT '',
    host_id                    uuid NOT NULL REFERENCES hosts (id),
    gpu_server_id              uuid REFERENCES gpu_servers (id),
    vcpus                      integer NOT NULL,
    memory_mib                 integer NOT NULL,
    disk_gib                   integer NOT NULL,
    tier                       text NOT NULL,
    gpu_model                  text NOT NULL DEFAULT '',
    gpu_count                  integer NOT NULL DEFAULT 0,
    gpu_memory_bytes           bigint NOT NULL DEFAULT 0, -- per GPU, as reserved
    memory_quota               bigint NOT NULL DEFAULT 0, -- per GPU in the token; 0 = whole GPU
    reboot_generation          bigint NOT NULL DEFAULT 0,
    observed_reboot_generation bigint NOT NULL DEFAULT 0,
    vf_pci_address             text NOT NULL DEFAULT '',
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX instances_tenant ON instances (tenant_id, id);
CREATE INDEX instances_host ON instances (host_id) WHERE state <> 'deleted';

CREATE TABLE gpu_reservations (
    instance_id uuid NOT NULL REFERENCES instances (id),
    gpu_id      uuid NOT NULL REFERENCES gpus (id),
    bytes       bigint NOT NULL CHECK (bytes > 0),
    dedicated   boolean NOT NULL,
    PRIMARY KEY (instance_id, gpu_id)
);
CREATE INDEX gpu_reservations_gpu ON gpu_reservations (gpu_id);

CREATE TABLE instance_events (
    id          bigserial PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES instances (id),
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    reason      text NOT NULL DEFAULT '',
    actor       text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX instance_events_instance ON instance_events (instance_id, id);

CREATE TABLE audit_log (
    id            bigserial PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    actor_user_id uuid,
    actor_role    text NOT NULL,
    actor_daemon  uuid,
    tenant_id     uuid,
    action        text NOT NULL,
    resource_type text NOT NULL,
    resource_id   text NOT NULL,
    request_id    text NOT NULL DEFAULT '',
    detail        jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

CREATE TABLE idempotency_keys (
    principal    text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    -- 0 while the first request is still being served.
    status       integer NOT NULL DEFAULT 0,
    content_type text NOT NULL DEFAULT '',
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, key)
);

-- +goose Down
DROP TABLE idempotency_keys, audit_log, instance_events, gpu_reservations, instances, gpus,
    gpu_servers, hosts, instance_types, tiers, gpu_models, api_keys, users, tenants;
DROP SEQUENCE tenant_partition_keys;

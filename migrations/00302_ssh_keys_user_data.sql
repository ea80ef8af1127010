-- +goose Up
-- SSH public keys as a resource of each user, and what an instance is created with: the
-- authorized keys resolved at create (ids and/or an inline key) and the tenant's cloud-init
-- user-data. Keys are copied into the instance, so deleting a key later does not change a VM.
CREATE TABLE ssh_keys (
    id          uuid PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users (id),
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    public_key  text NOT NULL,
    -- SHA256:<base64> as OpenSSH prints it; one user registers a key once.
    fingerprint text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, fingerprint)
);
CREATE INDEX ssh_keys_user ON ssh_keys (user_id, id);

ALTER TABLE instances
    ADD COLUMN ssh_authorized_keys text[] NOT NULL DEFAULT '{}',
    ADD COLUMN user_data text NOT NULL DEFAULT '' CHECK (octet_length(user_data) <= 16384);

-- +goose Down
ALTER TABLE instances DROP COLUMN user_data, DROP COLUMN ssh_authorized_keys;
DROP TABLE ssh_keys;

-- +goose Up
-- Interactive serial consoles (issue 16). A host reports where the apiserver opens its
-- instances' consoles; a tenant gets a short-lived, single-use ticket (kept as its SHA-256) from
-- an authenticated POST, then opens the console's WebSocket with it: browsers cannot put an
-- Authorization header on a WebSocket.
ALTER TABLE hosts ADD COLUMN console_url text NOT NULL DEFAULT '';

CREATE TABLE console_tickets (
    ticket_hash bytea PRIMARY KEY,
    instance_id uuid NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- who asked: the console session acts and is audited as them
    user_id     uuid,
    role        text NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_tickets_expiry ON console_tickets (expires_at);

-- +goose Down
DROP TABLE console_tickets;
ALTER TABLE hosts DROP COLUMN console_url;

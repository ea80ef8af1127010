-- +goose Up
-- How a tenant reaches an instance: the extra guest ports it asked to have forwarded, the host
-- ports its host forwarded (SSH's 22 first) at the host's public name, and the tail of its serial
-- console as the host last shipped it.
ALTER TABLE instances
    ADD COLUMN forward_ports integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN public_host   text NOT NULL DEFAULT '',
    ADD COLUMN port_forwards jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN console_log   text NOT NULL DEFAULT '',
    ADD COLUMN console_log_at timestamptz;

-- +goose Down
ALTER TABLE instances DROP COLUMN console_log_at, DROP COLUMN console_log, DROP COLUMN port_forwards,
    DROP COLUMN public_host, DROP COLUMN forward_ports;

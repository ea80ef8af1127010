-- +goose Up
-- The address an instance has on its tenant's network, as its host last observed it (from the
-- network's DHCP lease); empty until known or without a tenant network.
ALTER TABLE instances ADD COLUMN private_address text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE instances DROP COLUMN private_address;

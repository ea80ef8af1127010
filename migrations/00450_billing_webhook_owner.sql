-- +goose Up
-- Who owns a webhook endpoint. A tenant admin's endpoint (owner 'tenant') is the tenant's: it sees,
-- reads the log of and deletes it. Finance's endpoints (owner 'finance'), for every tenant or for
-- one tenant's events, are finance's integrations: the tenant neither sees nor deletes them, so a
-- tenant cannot silence the alerts finance watches it with.
ALTER TABLE billing_webhooks ADD COLUMN owner text NOT NULL DEFAULT 'tenant'
    CHECK (owner IN ('tenant', 'finance'));
UPDATE billing_webhooks SET owner = 'finance' WHERE tenant_id IS NULL;
ALTER TABLE billing_webhooks ADD CONSTRAINT billing_webhooks_tenant_owned_has_tenant
    CHECK (owner = 'finance' OR tenant_id IS NOT NULL);

-- +goose Down
ALTER TABLE billing_webhooks DROP CONSTRAINT billing_webhooks_tenant_owned_has_tenant;
ALTER TABLE billing_webhooks DROP COLUMN owner;

package sdk

import (
	"context"
	"iter"
)

// Me says who the caller is.
func (c *Client) Me(ctx context.Context) (Me, error) {
	return do[Me](ctx, c, request{op: opGetMe})
}

// CreateTenant creates a tenant (operator).
func (c *Client) CreateTenant(ctx context.Context, r CreateTenantRequest) (Tenant, error) {
	return do[Tenant](ctx, c, request{op: opCreateTenant, body: r})
}

// ListTenants returns a page of tenants (operator, finance).
func (c *Client) ListTenants(ctx context.Context, o ListOptions) (Page[Tenant], error) {
	return listPage[Tenant](ctx, c, opListTenants, o.values())
}

// Tenants iterates every tenant.
func (c *Client) Tenants(ctx context.Context) iter.Seq2[Tenant, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[Tenant], error) {
		return c.ListTenants(ctx, ListOptions{Limit: 200, Cursor: cur})
	})
}

// GetTenant returns a tenant with its quotas and usage.
func (c *Client) GetTenant(ctx context.Context, id string) (Tenant, error) {
	return do[Tenant](ctx, c, request{op: opGetTenant, args: []string{id}})
}

// SetQuota replaces a tenant's quotas (operator).
func (c *Client) SetQuota(ctx context.Context, tenantID string, q Quota) (Tenant, error) {
	return do[Tenant](ctx, c, request{op: opSetQuota, args: []string{tenantID}, body: q})
}

// CreateUser invites a user.
func (c *Client) CreateUser(ctx context.Context, r CreateUserRequest) (User, error) {
	return do[User](ctx, c, request{op: opCreateUser, body: r})
}

// UserListOptions page through users; TenantID filters (operators only; tenant admins always
// see their own tenant).
type UserListOptions struct {
	ListOptions
	TenantID string
}

// ListUsers returns a page of users.
func (c *Client) ListUsers(ctx context.Context, o UserListOptions) (Page[User], error) {
	q := o.values()
	if o.TenantID != "" {
		q.Set("tenant_id", o.TenantID)
	}
	return listPage[User](ctx, c, opListUsers, q)
}

// Users iterates every user visible to the caller (in tenantID, if not empty).
func (c *Client) Users(ctx context.Context, tenantID string) iter.Seq2[User, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[User], error) {
		return c.ListUsers(ctx, UserListOptions{ListOptions{Limit: 200, Cursor: cur}, tenantID})
	})
}

// GetUser returns a user.
func (c *Client) GetUser(ctx context.Context, id string) (User, error) {
	return do[User](ctx, c, request{op: opGetUser, args: []string{id}})
}

// CreateAPIKey makes a key for a user; the secret is in the answer only.
func (c *Client) CreateAPIKey(ctx context.Context, userID, name string) (NewAPIKey, error) {
	return do[NewAPIKey](ctx, c, request{op: opCreateKey, args: []string{userID}, body: map[string]string{"name": name}})
}

// ListAPIKeys returns a page of a user's keys.
func (c *Client) ListAPIKeys(ctx context.Context, userID string, o ListOptions) (Page[APIKey], error) {
	return listPage[APIKey](ctx, c, opListKeys, o.values(), userID)
}

// APIKeys iterates every key of a user.
func (c *Client) APIKeys(ctx context.Context, userID string) iter.Seq2[APIKey, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[APIKey], error) {
		return c.ListAPIKeys(ctx, userID, ListOptions{Limit: 200, Cursor: cur})
	})
}

// SetPasswordRequest sets a user's console password. CurrentPassword is needed when users change
// their own password and already have one.
type SetPasswordRequest struct {
	CurrentPassword string `json:"current_password,omitempty"`
	NewPassword     string `json:"new_password"`
}

// SetUserPassword sets the console (browser sign-in) password of a user.
func (c *Client) SetUserPassword(ctx context.Context, userID string, r SetPasswordRequest) error {
	return c.call(ctx, request{op: opSetPassword, args: []string{userID}, body: r})
}

// RevokeAPIKey revokes a key; it stops working at once.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	return c.call(ctx, request{op: opRevokeKey, args: []string{id}})
}

// ListAuditEvents returns a page of the audit log (the cursor is an entry id).
func (c *Client) ListAuditEvents(ctx context.Context, o ListOptions) (Page[AuditEntry], error) {
	return listPage[AuditEntry](ctx, c, opListAudit, o.values())
}

// AuditEvents iterates the audit log.
func (c *Client) AuditEvents(ctx context.Context) iter.Seq2[AuditEntry, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[AuditEntry], error) {
		return c.ListAuditEvents(ctx, ListOptions{Limit: 200, Cursor: cur})
	})
}

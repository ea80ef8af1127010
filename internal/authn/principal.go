// Package authn carries the authenticated caller through a request. The apiserver's middleware
// sets it; every handler (the apiserver's own, billing's) reads it from the request context.
package authn

import (
	"context"

	"github.com/google/uuid"
)

// Role is what a caller may do. Tenant roles are scoped to their tenant; operator and finance
// are platform-wide.
type Role string

const (
	RoleTenantAdmin  Role = "tenant-admin"
	RoleTenantMember Role = "tenant-member"
	RoleOperator     Role = "operator"
	RoleFinance      Role = "finance"
	// RoleDaemon is a hostd or gpuserverd authenticating with its own credentials.
	RoleDaemon Role = "daemon"
)

// Valid reports whether r is a role a user can hold.
func (r Role) Valid() bool {
	switch r {
	case RoleTenantAdmin, RoleTenantMember, RoleOperator, RoleFinance:
		return true
	}
	return false
}

// Principal is who is calling.
type Principal struct {
	UserID   uuid.UUID // zero for daemons
	TenantID uuid.UUID // zero for platform roles (operator, finance) and daemons
	Role     Role
	// DaemonID is the host or GPU server id when Role is RoleDaemon.
	DaemonID uuid.UUID
	// Daemon says which kind of daemon DaemonID is: what it may report depends on it (a host
	// reports VM usage, a GPU server GPU usage).
	Daemon DaemonKind
}

// DaemonKind is the kind of daemon a credential belongs to.
type DaemonKind string

const (
	DaemonHost      DaemonKind = "host"
	DaemonGPUServer DaemonKind = "gpu-server"
)

// IsPlatform reports whether the principal acts across tenants.
func (p Principal) IsPlatform() bool { return p.Role == RoleOperator || p.Role == RoleFinance }

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal of ctx, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

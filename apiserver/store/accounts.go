package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"gpucloud/internal/authn"
)

// Tenant is a customer organisation with its quotas and current usage.
type Tenant struct {
	ID                  uuid.UUID `json:"id" gorm:"primaryKey"`
	Name                string    `json:"name"`
	PartitionKey        int       `json:"partition_key"`
	QuotaInstances      int       `json:"quota_instances"`
	QuotaGPUs           int       `json:"quota_gpus" gorm:"column:quota_gpus"`
	QuotaGPUMemoryBytes int64     `json:"quota_gpu_memory_bytes" gorm:"column:quota_gpu_memory_bytes"`
	UsedInstances       int       `json:"used_instances"`
	UsedGPUs            int       `json:"used_gpus" gorm:"column:used_gpus"`
	UsedGPUMemoryBytes  int64     `json:"used_gpu_memory_bytes" gorm:"column:used_gpu_memory_bytes"`
	QuotaVolumes        int       `json:"quota_volumes"`
	QuotaVolumeGiB      int       `json:"quota_volume_gib" gorm:"column:quota_volume_gib"`
	UsedVolumes         int       `json:"used_volumes"`
	UsedVolumeGiB       int       `json:"used_volume_gib" gorm:"column:used_volume_gib"`
	CreatedAt           time.Time `json:"created_at"`
}

// User is a person with a role, in a tenant or on the platform.
type User struct {
	ID        uuid.UUID  `json:"id" gorm:"primaryKey"`
	TenantID  *uuid.UUID `json:"tenant_id,omitempty"`
	Email     string     `json:"email"`
	Role      string     `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
}

// APIKey is a key's metadata; the secret itself is only returned once, at creation.
type APIKey struct {
	ID         uuid.UUID  `json:"id" gorm:"primaryKey"`
	UserID     uuid.UUID  `json:"user_id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Hash       []byte     `json:"-"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// CreateTenant inserts t (ID and partition key are assigned).
func (s *Store) CreateTenant(ctx context.Context, t *Tenant) error {
	t.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO tenants (id, name, partition_key, quota_instances, quota_gpus, quota_gpu_memory_bytes)
			VALUES ($1, $2, nextval('tenant_partition_keys'), $3, $4, $5) RETURNING partition_key, created_at`,
			t.ID, t.Name, t.QuotaInstances, t.QuotaGPUs, t.QuotaGPUMemoryBytes).Scan(&t.PartitionKey, &t.CreatedAt)
		if err != nil {
			return fmt.Errorf("create tenant: %w", err)
		}
		return Audit(ctx, tx, t.ID, "create", "tenant", t.ID.String(), t)
	})
}

// TenantExists reports whether a tenant of that id exists.
func (s *Store) TenantExists(ctx context.Context, id uuid.UUID) (bool, error) {
	var ok bool
	if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("tenant %s exists: %w", id, err)
	}
	return ok, nil
}

// GetTenant returns a tenant.
func (s *Store) GetTenant(ctx context.Context, id uuid.UUID) (Tenant, error) {
	return getByID[Tenant](ctx, s, id, "tenant")
}

// ListTenants pages tenants by id.
func (s *Store) ListTenants(ctx context.Context, after uuid.UUID, limit int) ([]Tenant, error) {
	return listPage[Tenant](ctx, s, after, limit, "tenants", nil)
}

// SetQuota changes a tenant's quotas; nil volume quotas stay as they are. Lowering below usage
// is allowed: it only stops new creates.
func (s *Store) SetQuota(ctx context.Context, id uuid.UUID, instances, gpus int, gpuMem int64, volumes, volumeGiB *int) (Tenant, error) {
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET quota_instances = $2, quota_gpus = $3, quota_gpu_memory_bytes = $4,
			quota_volumes = coalesce($5, quota_volumes), quota_volume_gib = coalesce($6, quota_volume_gib) WHERE id = $1`,
			id, instances, gpus, gpuMem, volumes, volumeGiB)
		if err != nil {
			return fmt.Errorf("set quota: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return Audit(ctx, tx, id, "set-quota", "tenant", id.String(),
			map[string]any{"instances": instances, "gpus": gpus, "gpu_memory_bytes": gpuMem, "volumes": volumes, "volume_gib": volumeGiB})
	})
	if err != nil {
		return Tenant{}, err
	}
	return s.GetTenant(ctx, id)
}

// CreateUser inserts u.
func (s *Store) CreateUser(ctx context.Context, u *User) error {
	u.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO users (id, tenant_id, email, role) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			u.ID, u.TenantID, u.Email, u.Role).Scan(&u.CreatedAt)
		if err != nil {
			return fmt.Errorf("create user: %w", err)
		}
		var tenant uuid.UUID
		if u.TenantID != nil {
			tenant = *u.TenantID
		}
		return Audit(ctx, tx, tenant, "create", "user", u.ID.String(), u)
	})
}

// GetUser returns a user.
func (s *Store) GetUser(ctx context.Context, id uuid.UUID) (User, error) {
	return getByID[User](ctx, s, id, "user")
}

// ListUsers pages users; tenant zero lists every user.
func (s *Store) ListUsers(ctx context.Context, tenant, after uuid.UUID, limit int) ([]User, error) {
	return listPage[User](ctx, s, after, limit, "users", func(q *gorm.DB) *gorm.DB {
		if tenant != uuid.Nil {
			q = q.Where("tenant_id = ?", tenant)
		}
		return q
	})
}

// CreateAPIKey makes a key for user and returns its metadata and the secret (shown once).
func (s *Store) CreateAPIKey(ctx context.Context, user User, name string) (APIKey, string, error) {
	secret, hash := NewSecret(PrefixUserKey)
	k := APIKey{ID: NewID(), UserID: user.ID, Name: name, Prefix: SecretPrefix(secret), Hash: hash}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO api_keys (id, user_id, name, prefix, hash) VALUES ($1, $2, $3, $4, $5) RETURNING created_at`,
			k.ID, k.UserID, k.Name, k.Prefix, k.Hash).Scan(&k.CreatedAt); err != nil {
			return fmt.Errorf("create api key: %w", err)
		}
		var tenant uuid.UUID
		if user.TenantID != nil {
			tenant = *user.TenantID
		}
		return Audit(ctx, tx, tenant, "create", "api-key", k.ID.String(), map[string]any{"user_id": user.ID, "name": name})
	})
	return k, secret, err
}

// ListAPIKeys lists a user's keys.
func (s *Store) ListAPIKeys(ctx context.Context, user, after uuid.UUID, limit int) ([]APIKey, error) {
	return listPage[APIKey](ctx, s, after, limit, "api keys", func(q *gorm.DB) *gorm.DB { return q.Where("user_id = ?", user) })
}

// GetAPIKey returns a key's metadata with its owner.
func (s *Store) GetAPIKey(ctx context.Context, id uuid.UUID) (APIKey, User, error) {
	k, err := getByID[APIKey](ctx, s, id, "api key")
	if err != nil {
		return k, User{}, err
	}
	u, err := s.GetUser(ctx, k.UserID)
	return k, u, err
}

// RevokeAPIKey revokes a key; revoking twice is harmless.
func (s *Store) RevokeAPIKey(ctx context.Context, k APIKey, owner User) error {
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, k.ID); err != nil {
			return fmt.Errorf("revoke api key: %w", err)
		}
		var tenant uuid.UUID
		if owner.TenantID != nil {
			tenant = *owner.TenantID
		}
		if err := credentialsChanged(ctx, tx); err != nil {
			return err
		}
		return Audit(ctx, tx, tenant, "revoke", "api-key", k.ID.String(), nil)
	})
	if err == nil {
		s.keys.forget() // at once here, without waiting for our own notification
	}
	return err
}

// Credential is what a secret resolves to.
type Credential struct {
	Principal  authn.Principal
	KeyID      uuid.UUID // user keys only
	LastUsedAt time.Time
}

// Authenticate resolves a secret. It returns ErrNotFound for unknown or revoked secrets, and for
// deleted daemons.
func (s *Store) Authenticate(ctx context.Context, secret string) (Credential, error) {
	var c Credential
	hash := HashSecret(secret)
	var err error
	switch {
	case len(secret) > 4 && secret[:4] == PrefixUserKey:
		return s.authenticateKey(ctx, [32]byte(hash))
	case len(secret) > 4 && secret[:4] == PrefixHost:
		err = s.Pool.QueryRow(ctx, `SELECT id FROM hosts WHERE credential_hash = $1 AND deleted_at IS NULL`, hash).Scan(&c.Principal.DaemonID)
		c.Principal.Role, c.Principal.Daemon = authn.RoleDaemon, authn.DaemonHost
	case len(secret) > 4 && secret[:4] == PrefixGPUServer:
		err = s.Pool.QueryRow(ctx, `SELECT id FROM gpu_servers WHERE credential_hash = $1 AND deleted_at IS NULL`, hash).Scan(&c.Principal.DaemonID)
		c.Principal.Role, c.Principal.Daemon = authn.RoleDaemon, authn.DaemonGPUServer
	default:
		return c, ErrNotFound
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("authenticate: %w", err)
	}
	return c, nil
}

// authenticateKey resolves a user API key's hash, from keyCache when it can.
func (s *Store) authenticateKey(ctx context.Context, hash [32]byte) (Credential, error) {
	c, gen, ok := s.keys.get(hash)
	if ok {
		return c, nil
	}
	var tenant *uuid.UUID
	var last *time.Time
	var role string
	err := s.Pool.QueryRow(ctx, `SELECT k.id, k.last_used_at, u.id, u.tenant_id, u.role FROM api_keys k
		JOIN users u ON u.id = k.user_id WHERE k.hash = $1 AND k.revoked_at IS NULL`, hash[:]).
		Scan(&c.KeyID, &last, &c.Principal.UserID, &tenant, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("authenticate: %w", err)
	}
	c.Principal.Role = authn.Role(role)
	if tenant != nil {
		c.Principal.TenantID = *tenant
	}
	if last != nil {
		c.LastUsedAt = *last
	}
	s.keys.put(hash, c, gen)
	return c, nil
}

// TouchAPIKey records that a key was used.
func (s *Store) TouchAPIKey(ctx context.Context, id uuid.UUID) error {
	_, err := s.Pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now() WHERE id = $1`, id)
	return err
}

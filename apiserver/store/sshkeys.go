package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SSHKey is a user's SSH public key, named and fingerprinted (SHA256:..., as OpenSSH shows it).
type SSHKey struct {
	ID          uuid.UUID `json:"id"`
	UserID      uuid.UUID `json:"user_id"`
	TenantID    uuid.UUID `json:"tenant_id"`
	Name        string    `json:"name"`
	PublicKey   string    `json:"public_key"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
}

const sshKeyCols = `id, user_id, tenant_id, name, public_key, fingerprint, created_at`

func scanSSHKey(row pgx.Row) (SSHKey, error) {
	var k SSHKey
	err := row.Scan(&k.ID, &k.UserID, &k.TenantID, &k.Name, &k.PublicKey, &k.Fingerprint, &k.CreatedAt)
	return k, err
}

// ErrDuplicateSSHKey: the user already registered a key with that fingerprint.
var ErrDuplicateSSHKey = errors.New("this key is already registered (same fingerprint)")

// CreateSSHKey records k for its user.
func (s *Store) CreateSSHKey(ctx context.Context, k *SSHKey) error {
	k.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO ssh_keys (id, user_id, tenant_id, name, public_key, fingerprint)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`, k.ID, k.UserID, k.TenantID, k.Name, k.PublicKey, k.Fingerprint).
			Scan(&k.CreatedAt)
		if IsUniqueViolation(err) {
			return &FieldError{Field: "public_key", Reason: ErrDuplicateSSHKey.Error()}
		}
		if err != nil {
			return fmt.Errorf("create ssh key: %w", err)
		}
		return Audit(ctx, tx, k.TenantID, "create", "ssh-key", k.ID.String(), map[string]string{"fingerprint": k.Fingerprint})
	})
}

// ListSSHKeys lists a user's keys, oldest first.
func (s *Store) ListSSHKeys(ctx context.Context, user uuid.UUID) ([]SSHKey, error) {
	return queryAll(ctx, s, "list ssh keys", scanSSHKey, `SELECT `+sshKeyCols+` FROM ssh_keys WHERE user_id = $1 ORDER BY id`, user)
}

// GetSSHKey returns one of user's keys; another user's key is ErrNotFound.
func (s *Store) GetSSHKey(ctx context.Context, user, id uuid.UUID) (SSHKey, error) {
	k, err := scanSSHKey(s.Pool.QueryRow(ctx, `SELECT `+sshKeyCols+` FROM ssh_keys WHERE id = $1 AND user_id = $2`, id, user))
	if errors.Is(err, pgx.ErrNoRows) {
		return k, ErrNotFound
	}
	if err != nil {
		return k, fmt.Errorf("get ssh key: %w", err)
	}
	return k, nil
}

// DeleteSSHKey removes one of user's keys; VMs created with it keep it.
func (s *Store) DeleteSSHKey(ctx context.Context, user, id uuid.UUID) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		var tenant uuid.UUID
		err := tx.QueryRow(ctx, `DELETE FROM ssh_keys WHERE id = $1 AND user_id = $2 RETURNING tenant_id`, id, user).Scan(&tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete ssh key: %w", err)
		}
		return Audit(ctx, tx, tenant, "delete", "ssh-key", id.String(), nil)
	})
}

// ResolveSSHKeys returns the public keys of ids, which must all be user's; the first that is not
// is a field error naming its index.
func (s *Store) ResolveSSHKeys(ctx context.Context, user uuid.UUID, ids []uuid.UUID) ([]string, error) {
	out := make([]string, 0, len(ids))
	for i, id := range ids {
		k, err := s.GetSSHKey(ctx, user, id)
		if errors.Is(err, ErrNotFound) {
			return nil, &FieldError{Field: fmt.Sprintf("ssh_key_ids[%d]", i), Reason: "no such SSH key of yours"}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, k.PublicKey)
	}
	return out, nil
}

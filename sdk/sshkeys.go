package sdk

import (
	"context"
	"time"
)

// SSHKey is one of the caller's SSH public keys; Fingerprint is SHA256:..., as OpenSSH shows it.
type SSHKey struct {
	ID          string    `json:"id"`
	UserID      string    `json:"user_id"`
	TenantID    string    `json:"tenant_id"`
	Name        string    `json:"name"`
	PublicKey   string    `json:"public_key"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
}

// CreateSSHKeyRequest adds a key: PublicKey is one authorized_keys line, without options.
type CreateSSHKeyRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

// ListSSHKeys returns the caller's SSH keys.
func (c *Client) ListSSHKeys(ctx context.Context) ([]SSHKey, error) {
	p, err := listPage[SSHKey](ctx, c, opListSSHKeys, nil)
	return p.Items, err
}

// GetSSHKey returns one of the caller's SSH keys.
func (c *Client) GetSSHKey(ctx context.Context, id string) (SSHKey, error) {
	return do[SSHKey](ctx, c, request{op: opGetSSHKey, args: []string{id}})
}

// CreateSSHKey adds an SSH key; a key already added (same fingerprint) is refused.
func (c *Client) CreateSSHKey(ctx context.Context, r CreateSSHKeyRequest) (SSHKey, error) {
	return do[SSHKey](ctx, c, request{op: opCreateSSHKey, body: r})
}

// DeleteSSHKey removes an SSH key; VMs created with it keep it.
func (c *Client) DeleteSSHKey(ctx context.Context, id string) error {
	return c.call(ctx, request{op: opDeleteSSHKey, args: []string{id}})
}

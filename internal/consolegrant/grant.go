// Package consolegrant issues and verifies the grants that let an apiserver open an instance's
// serial console on the instance's host. The apiserver signs a grant with its Ed25519 key (the
// one that signs session tokens) for one instance on one host, valid for seconds; hostd verifies
// it offline with the public key its heartbeat answer carries, and admits each grant once.
//
// A grant is "gcg1.<payload>.<signature>", both parts unpadded base64url; the payload is JSON
// claims. The prefix differs from a session token's, so neither passes for the other.
package consolegrant

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

const (
	prefix = "gcg1."
	// MaxLen bounds what a verifier reads before any work.
	MaxLen = 2048
	// TTL is how long a grant is good for: the apiserver uses it at once.
	TTL = 30 * time.Second
	// Skew tolerated between the apiserver's clock and a host's.
	Skew = 30 * time.Second
)

// Errors a verifier returns; wrapped with detail.
var (
	ErrMalformed = errors.New("malformed console grant")
	ErrSignature = errors.New("bad console grant signature")
	ErrExpired   = errors.New("console grant expired")
	ErrAudience  = errors.New("console grant is for another host")
	ErrClaims    = errors.New("invalid console grant claims")
	ErrReplayed  = errors.New("console grant already used")
)

// Claims are what a grant allows: one console connection to one instance on one host.
type Claims struct {
	InstanceID string `json:"iid"`
	TenantID   string `json:"tid"`
	HostID     string `json:"aud"`
	// UserID is who asked (for the host's log); empty for an API key without a user.
	UserID    string `json:"uid,omitempty"`
	Nonce     string `json:"jti"`
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`
}

// New returns claims for instance on host, issued at now with a fresh nonce.
func New(instanceID, tenantID, hostID, userID string, now time.Time) Claims {
	var n [16]byte
	rand.Read(n[:])
	return Claims{InstanceID: instanceID, TenantID: tenantID, HostID: hostID, UserID: userID,
		Nonce: hex.EncodeToString(n[:]), IssuedAt: now.Unix(), ExpiresAt: now.Add(TTL).Unix()}
}

// Validate checks the claims are complete and coherent.
func (c *Claims) Validate() error {
	switch {
	case c.InstanceID == "" || c.TenantID == "" || c.HostID == "":
		return fmt.Errorf("%w: iid, tid and aud are required", ErrClaims)
	case len(c.Nonce) < 16 || len(c.Nonce) > 64:
		return fmt.Errorf("%w: jti must be 16-64 characters", ErrClaims)
	case c.ExpiresAt <= c.IssuedAt:
		return fmt.Errorf("%w: expires before it is issued", ErrClaims)
	case c.ExpiresAt-c.IssuedAt > int64(2*TTL/time.Second):
		return fmt.Errorf("%w: valid for longer than %v", ErrClaims, 2*TTL)
	}
	return nil
}

// Sign returns the grant for c.
func Sign(key ed25519.PrivateKey, c Claims) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("consolegrant: encode claims: %w", err)
	}
	signed := prefix + base64.RawURLEncoding.EncodeToString(payload)
	sig := ed25519.Sign(key, []byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Verify checks the grant's signature, expiry at now and host, and returns its claims.
func Verify(pub ed25519.PublicKey, grant, hostID string, now time.Time) (Claims, error) {
	var c Claims
	if len(grant) > MaxLen {
		return c, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(grant), MaxLen)
	}
	signed, sigText, ok := strings.Cut(strings.TrimPrefix(grant, prefix), ".")
	if !strings.HasPrefix(grant, prefix) || !ok {
		return c, fmt.Errorf("%w: want %q<payload>.<signature>", ErrMalformed, prefix)
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return c, fmt.Errorf("%w: signature is not %d base64url bytes", ErrMalformed, ed25519.SignatureSize)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, []byte(prefix+signed), sig) {
		return c, ErrSignature
	}
	payload, err := base64.RawURLEncoding.DecodeString(signed)
	if err != nil {
		return c, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	if now.Unix() > c.ExpiresAt+int64(Skew/time.Second) {
		return c, fmt.Errorf("%w at %s", ErrExpired, time.Unix(c.ExpiresAt, 0).UTC().Format(time.RFC3339))
	}
	if now.Unix()+int64(Skew/time.Second) < c.IssuedAt {
		return c, fmt.Errorf("%w: issued in the future", ErrClaims)
	}
	if c.HostID != hostID {
		return c, fmt.Errorf("%w: grant for %q, this is %q", ErrAudience, c.HostID, hostID)
	}
	return c, nil
}

// Once admits each grant's nonce once while it could still verify; the zero value is ready.
type Once struct {
	mu   sync.Mutex
	seen map[string]int64 // nonce -> unix time after which it no longer verifies
}

// Use records c's nonce, or returns ErrReplayed when it was used before.
func (o *Once) Use(c Claims, now time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]int64{}
	}
	for n, until := range o.seen {
		if now.Unix() > until {
			delete(o.seen, n)
		}
	}
	if _, ok := o.seen[c.Nonce]; ok {
		return ErrReplayed
	}
	o.seen[c.Nonce] = c.ExpiresAt + int64(Skew/time.Second)
	return nil
}

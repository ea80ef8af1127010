// Package sessiontoken issues and verifies the tokens that admit a VM's guest library to a GPU
// server. The apiserver signs them with its Ed25519 key; gpuserverd verifies them offline with
// the public key alone, so a GPU server needs no call to the control plane to admit a session.
//
// A token is "gct1.<payload>.<signature>", both parts unpadded base64url; the payload is JSON claims.
package sessiontoken

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	prefix = "gct1."
	// MaxLen bounds what a verifier reads before any work: a token is small.
	MaxLen = 4096
	// Skew tolerated between the apiserver's clock and a GPU server's.
	Skew = 30 * time.Second
)

// Tier values.
const (
	TierDedicated = "dedicated"
	TierShared    = "shared"
)

// Claims are what a token grants.
type Claims struct {
	SessionID  string   `json:"sid"`
	TenantID   string   `json:"tid"`
	InstanceID string   `json:"iid"`
	GPUServer  string   `json:"aud"`  // the GPU server id the token is good for
	GPUs       []string `json:"gpus"` // GPU UUIDs on that server
	Tier       string   `json:"tier"`
	// MemoryQuota is the GPU memory the session may hold, in bytes, per GPU; 0 means the whole GPU
	// (dedicated tier).
	MemoryQuota uint64 `json:"memq"`
	IssuedAt    int64  `json:"iat"`
	ExpiresAt   int64  `json:"exp"`
}

// Errors a verifier returns; wrapped with detail.
var (
	ErrMalformed = errors.New("malformed token")
	ErrSignature = errors.New("bad token signature")
	ErrExpired   = errors.New("token expired")
	ErrAudience  = errors.New("token is for another GPU server")
	ErrClaims    = errors.New("invalid token claims")
)

// Validate checks the claims are complete and coherent.
func (c *Claims) Validate() error {
	switch {
	case c.SessionID == "" || c.TenantID == "" || c.InstanceID == "" || c.GPUServer == "":
		return fmt.Errorf("%w: sid, tid, iid and aud are required", ErrClaims)
	case len(c.GPUs) == 0:
		return fmt.Errorf("%w: no GPU granted", ErrClaims)
	case c.Tier != TierDedicated && c.Tier != TierShared:
		return fmt.Errorf("%w: tier %q is neither dedicated nor shared", ErrClaims, c.Tier)
	case c.Tier == TierShared && c.MemoryQuota == 0:
		return fmt.Errorf("%w: a shared-tier token needs a memory quota", ErrClaims)
	case c.ExpiresAt <= c.IssuedAt:
		return fmt.Errorf("%w: expires before it is issued", ErrClaims)
	}
	return nil
}

// Sign returns the token for c.
func Sign(key ed25519.PrivateKey, c Claims) (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("sessiontoken: encode claims: %w", err)
	}
	signed := prefix + base64.RawURLEncoding.EncodeToString(payload)
	sig := ed25519.Sign(key, []byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Verify checks the token's signature, expiry at now and audience, and returns its claims.
// audience "" skips the audience check.
func Verify(pub ed25519.PublicKey, token, audience string, now time.Time) (Claims, error) {
	var c Claims
	if len(token) > MaxLen {
		return c, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(token), MaxLen)
	}
	if !strings.HasPrefix(token, prefix) {
		return c, fmt.Errorf("%w: missing %q prefix", ErrMalformed, prefix)
	}
	dot := strings.LastIndexByte(token, '.')
	if dot <= len(prefix) {
		return c, fmt.Errorf("%w: no signature part", ErrMalformed)
	}
	signed, sigText := token[:dot], token[dot+1:]
	sig, err := base64.RawURLEncoding.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return c, fmt.Errorf("%w: signature is not %d base64url bytes", ErrMalformed, ed25519.SignatureSize)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, []byte(signed), sig) {
		return c, ErrSignature
	}
	payload, err := base64.RawURLEncoding.DecodeString(signed[len(prefix):])
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
	if audience != "" && c.GPUServer != audience {
		return c, fmt.Errorf("%w: token for %q, this is %q", ErrAudience, c.GPUServer, audience)
	}
	return c, nil
}

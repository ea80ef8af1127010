package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Credential prefixes tell the authenticator which table to look in without a second query.
const (
	PrefixUserKey   = "gcu_"
	PrefixHost      = "gch_"
	PrefixGPUServer = "gcg_"
)

// NewSecret returns a random credential with prefix (256 bits of entropy) and its hash.
func NewSecret(prefix string) (secret string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // cannot happen on a working kernel
	}
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, HashSecret(secret)
}

// HashSecret is how credentials are stored: SHA-256 is enough for 256-bit random secrets (no
// dictionary to attack) and costs microseconds, where bcrypt would cost milliseconds per request.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// SecretPrefix is the part of a secret safe to show in lists.
func SecretPrefix(secret string) string {
	if len(secret) > 12 {
		return secret[:12]
	}
	return strings.Clone(secret)
}

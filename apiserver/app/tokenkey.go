package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const pemType = "GPUCLOUD SESSION TOKEN KEY"

// LoadTokenKey reads the Ed25519 key that signs session tokens (PEM, the 32-byte seed).
func LoadTokenKey(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read token key: %w", err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != pemType || len(b.Bytes) != ed25519.SeedSize {
		return nil, fmt.Errorf("token key %s: not a %q PEM block with a %d-byte seed", path, pemType, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b.Bytes), nil
}

// LoadOrCreateTokenKey loads the key at path, creating it (mode 0600) when missing: the local
// stack's first run.
func LoadOrCreateTokenKey(path string) (ed25519.PrivateKey, error) {
	key, err := LoadTokenKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("token key dir: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: seed})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("write token key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// LoadMetricsToken reads the /metrics bearer token from path ("" when path is ""): one line of
// at least 32 characters, so it cannot be guessed.
func LoadMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("metrics token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("metrics token %s: want one line of at least 32 characters", path)
	}
	return tok, nil
}

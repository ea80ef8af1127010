package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/internal/sessiontoken"
)

func TestMintedTokenVerifiesWithWrittenKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "pub")
	var out bytes.Buffer
	now := time.Now()
	err := run([]string{"-public-key-out", key, "-server", "gs9", "-gpus", "GPU-a,GPU-b", "-tier", "shared", "-quota", "1073741824"}, &out, now)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("public key file %q: %v", text, err)
	}
	c, err := sessiontoken.Verify(pub, strings.TrimSpace(out.String()), "gs9", now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tier != "shared" || c.MemoryQuota != 1<<30 || len(c.GPUs) != 2 || c.GPUs[1] != "GPU-b" {
		t.Fatalf("claims %+v", c)
	}
	if _, err := sessiontoken.Verify(pub, strings.TrimSpace(out.String()), "gs-other", now); err == nil {
		t.Fatal("token accepted by another GPU server")
	}
}

func TestBadFlagsAreRefusedWithoutWritingAKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "pub")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-gpus", "GPU-a"}, "-public-key-out"},
		{[]string{"-public-key-out", key}, "-gpus"},
		{[]string{"-public-key-out", key, "-gpus", "GPU-a", "-tier", "shared"}, "memory quota"},
		{[]string{"-public-key-out", key, "-gpus", "GPU-a", "-tier", "gold"}, "tier"},
		{[]string{"-public-key-out", key, "-gpus", "GPU-a", "-ttl", "-1h"}, "-ttl"},
	} {
		err := run(tc.args, &bytes.Buffer{}, time.Now())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(key); err == nil {
			t.Fatalf("%v: a key was written although the token was refused", tc.args)
		}
	}
}

// -count mints several tokens under one key, each for a session of its own.
func TestCountMintsTokensOfDistinctSessions(t *testing.T) {
	key := filepath.Join(t.TempDir(), "pub")
	var out bytes.Buffer
	now := time.Now()
	if err := run([]string{"-public-key-out", key, "-gpus", "GPU-a", "-session", "fs", "-count", "3"}, &out, now); err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(key)
	pub, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text)))
	lines := strings.Fields(out.String())
	if len(lines) != 3 {
		t.Fatalf("%d tokens, want 3", len(lines))
	}
	for i, tok := range lines {
		c, err := sessiontoken.Verify(pub, tok, "gs-local", now)
		if err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		if want := fmt.Sprintf("fs-%d", i+1); c.SessionID != want {
			t.Fatalf("token %d session %q, want %q", i, c.SessionID, want)
		}
	}
	if err := run([]string{"-public-key-out", key, "-gpus", "GPU-a", "-count", "0"}, &out, now); err == nil || !strings.Contains(err.Error(), "-count 0") {
		t.Fatalf("-count 0: %v", err)
	}
}

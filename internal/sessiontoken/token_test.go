package sessiontoken

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func testClaims(now time.Time) Claims {
	return Claims{
		SessionID: "s1", TenantID: "t1", InstanceID: "i1", GPUServer: "gs1",
		GPUs: []string{"GPU-1"}, Tier: TierShared, MemoryQuota: 1 << 30,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Hour).Unix(),
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	tok, err := Sign(priv, testClaims(now))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(pub, tok, "gs1", now)
	if err != nil {
		t.Fatal(err)
	}
	if c.TenantID != "t1" || c.MemoryQuota != 1<<30 || c.GPUs[0] != "GPU-1" {
		t.Fatalf("claims changed in transit: %+v", c)
	}
}

func TestVerifyRefuses(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	good, _ := Sign(priv, testClaims(now))
	forged, _ := Sign(otherPriv, testClaims(now))
	expired := testClaims(now.Add(-2 * time.Hour))
	expiredTok, _ := Sign(priv, expired)
	// Tamper: swap the payload of a token for another's while keeping the signature.
	parts := strings.Split(good, ".")
	other := testClaims(now)
	other.MemoryQuota = 1 << 40
	otherTok, _ := Sign(priv, other)
	tampered := parts[0] + "." + strings.Split(otherTok, ".")[1] + "." + parts[2]

	cases := []struct {
		name, token, aud string
		want             error
	}{
		{"forged", forged, "gs1", ErrSignature},
		{"tampered", tampered, "gs1", ErrSignature},
		{"expired", expiredTok, "gs1", ErrExpired},
		{"other server", good, "gs2", ErrAudience},
		{"garbage", "hello", "gs1", ErrMalformed},
		{"no signature", "gct1.abc", "gs1", ErrMalformed},
		{"huge", "gct1." + strings.Repeat("a", MaxLen), "gs1", ErrMalformed},
	}
	for _, tc := range cases {
		if _, err := Verify(pub, tc.token, tc.aud, now); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestSignRefusesIncompleteClaims(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(nil)
	c := testClaims(time.Now())
	c.MemoryQuota = 0
	if _, err := Sign(priv, c); !errors.Is(err, ErrClaims) {
		t.Fatalf("shared tier without quota: got %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	good, _ := Sign(priv, testClaims(now))
	f.Add(good)
	f.Add("gct1..")
	f.Add("gct1.e30.AAAA")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := Verify(pub, tok, "", now)
		if err == nil && c.Validate() != nil {
			t.Fatalf("accepted invalid claims %+v", c)
		}
	})
}

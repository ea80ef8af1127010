package consolegrant

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func keys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestGrantVerifiesOnlyForItsHostKeyAndTime(t *testing.T) {
	pub, priv := keys(t)
	otherPub, _ := keys(t)
	now := time.Unix(1_800_000_000, 0)
	g, err := Sign(priv, New("inst-1", "tenant-1", "host-1", "user-1", now))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(pub, g, "host-1", now.Add(5*time.Second))
	if err != nil || c.InstanceID != "inst-1" || c.TenantID != "tenant-1" || c.UserID != "user-1" {
		t.Fatalf("verify: %+v %v", c, err)
	}
	for name, tc := range map[string]struct {
		pub   ed25519.PublicKey
		grant string
		host  string
		at    time.Time
		want  error
	}{
		"another host":     {pub, g, "host-2", now, ErrAudience},
		"another key":      {otherPub, g, "host-1", now, ErrSignature},
		"expired":          {pub, g, "host-1", now.Add(TTL + Skew + 2*time.Second), ErrExpired},
		"from the future":  {pub, g, "host-1", now.Add(-Skew - 2*time.Second), ErrClaims},
		"no prefix":        {pub, strings.TrimPrefix(g, prefix), "host-1", now, ErrMalformed},
		"session token":    {pub, "gct1." + strings.TrimPrefix(g, prefix), "host-1", now, ErrMalformed},
		"payload tampered": {pub, prefix + "e30" + g[len(prefix)+3:], "host-1", now, ErrSignature},
		"signature cut":    {pub, g[:len(g)-4], "host-1", now, ErrMalformed},
		"too long":         {pub, g + strings.Repeat("A", MaxLen), "host-1", now, ErrMalformed},
		"no signature":     {pub, prefix + "e30", "host-1", now, ErrMalformed},
	} {
		if _, err := Verify(tc.pub, tc.grant, tc.host, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}
}

func TestSignRefusesIncompleteOrLongLivedClaims(t *testing.T) {
	_, priv := keys(t)
	now := time.Now()
	long := New("i", "t", "h", "", now)
	long.ExpiresAt = now.Add(time.Hour).Unix()
	for name, c := range map[string]Claims{
		"no instance": New("", "t", "h", "", now),
		"no host":     New("i", "t", "", "", now),
		"no nonce":    {InstanceID: "i", TenantID: "t", HostID: "h", IssuedAt: now.Unix(), ExpiresAt: now.Unix() + 5},
		"an hour":     long,
	} {
		if _, err := Sign(priv, c); !errors.Is(err, ErrClaims) {
			t.Errorf("%s: got %v, want ErrClaims", name, err)
		}
	}
}

func TestOnceAdmitsAGrantOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a, b := New("i", "t", "h", "", now), New("i", "t", "h", "", now)
	var o Once
	if err := o.Use(a, now); err != nil {
		t.Fatal(err)
	}
	if err := o.Use(a, now.Add(time.Second)); !errors.Is(err, ErrReplayed) {
		t.Fatalf("second use: %v", err)
	}
	if err := o.Use(b, now); err != nil {
		t.Fatalf("another grant: %v", err)
	}
	// Past its expiry the nonce is forgotten (Verify refuses the grant by then).
	o.Use(New("i", "t", "h", "", now.Add(time.Hour)), now.Add(time.Hour))
	if len(o.seen) != 1 {
		t.Fatalf("expired nonces kept: %d", len(o.seen))
	}
}

func FuzzVerify(f *testing.F) {
	pub, priv := keys(f)
	now := time.Unix(1_800_000_000, 0)
	g, _ := Sign(priv, New("i", "t", "h", "u", now))
	f.Add(g)
	f.Add(prefix + "e30.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Verify(pub, s, "h", now)
		if err == nil && (c.HostID != "h" || c.Validate() != nil) {
			t.Fatalf("accepted %q with claims %+v", s, c)
		}
	})
}

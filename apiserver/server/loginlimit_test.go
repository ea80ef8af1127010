package server

import (
	"fmt"
	"testing"
	"time"
)

func TestLoginLimiter(t *testing.T) {
	var l loginLimiter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const attacker, owner = "203.0.113.9", "198.51.100.7"
	for i := 0; i < loginMaxFailures-1; i++ {
		l.fail(attacker, "Alice@Example.com", t0.Add(time.Duration(i)*time.Second))
	}
	if w := l.blocked(attacker, "alice@example.com", t0.Add(time.Minute)); w != 0 {
		t.Fatalf("blocked after %d failures: %v", loginMaxFailures-1, w)
	}
	l.fail(attacker, " alice@example.com ", t0.Add(time.Minute))
	if w := l.blocked(attacker, "ALICE@example.com", t0.Add(time.Minute)); w != loginWindow-time.Minute {
		t.Fatalf("after %d failures: wait %v, want %v", loginMaxFailures, w, loginWindow-time.Minute)
	}
	// The owner, from their own address, is not locked out by the attacker's failures.
	if w := l.blocked(owner, "alice@example.com", t0.Add(time.Minute)); w != 0 {
		t.Fatalf("the owner is blocked by another source's failures: %v", w)
	}
	if w := l.blocked(attacker, "bob@example.com", t0.Add(time.Minute)); w != 0 {
		t.Fatalf("another e-mail is blocked: %v", w)
	}
	// The oldest failure ages out of the window, and with it the block.
	if w := l.blocked(attacker, "alice@example.com", t0.Add(loginWindow)); w != 0 {
		t.Fatalf("still blocked once the first failure aged out: %v", w)
	}
	l.fail(owner, "carol@example.com", t0)
	l.succeed(owner, "carol@example.com")
	if _, ok := l.entries[pairKey(owner, "carol@example.com")]; ok {
		t.Fatal("a successful sign-in keeps the failures")
	}
}

// A spray over many e-mails from one source is throttled as a whole; IPv6 addresses of one /64
// are one source.
func TestLoginLimiterPerSource(t *testing.T) {
	var l loginLimiter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < loginMaxPerSource; i++ {
		l.fail(fmt.Sprintf("2001:db8::%x", i+1), fmt.Sprintf("user%d@example.com", i), t0)
	}
	if w := l.blocked("2001:db8::ffff", "new@example.com", t0); w != loginWindow {
		t.Fatalf("a sprayer's next e-mail: wait %v, want %v", w, loginWindow)
	}
	if w := l.blocked("2001:db8:0:1::1", "new@example.com", t0); w != 0 {
		t.Fatalf("another /64 is blocked: %v", w)
	}
}

// Past the bound of remembered keys, the least recently failed are forgotten, not all of them:
// a source being throttled now stays throttled through a spray of new keys.
func TestLoginLimiterEvictsOldestOnly(t *testing.T) {
	l := loginLimiter{max: 100}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < loginMaxFailures; i++ {
		l.fail("203.0.113.9", "alice@example.com", t0)
	}
	for i := 0; i < 1000; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		l.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256), "x@example.com", now)
		if i%40 == 0 { // the throttled attacker keeps trying, and stays recent
			l.fail("203.0.113.9", "alice@example.com", now)
		}
	}
	if len(l.entries) > 100 || l.recent.Len() != len(l.entries) {
		t.Fatalf("%d keys (%d in order), want at most 100", len(l.entries), l.recent.Len())
	}
	if w := l.blocked("203.0.113.9", "alice@example.com", t0.Add(time.Second)); w == 0 {
		t.Fatal("the throttled source was forgotten in the spray")
	}
	if _, ok := l.entries[sourceKey("10.0.0.0")]; ok {
		t.Fatal("the oldest key was kept")
	}
	if _, ok := l.entries[sourceKey("10.0.3.231")]; !ok {
		t.Fatal("the newest key was evicted")
	}
}

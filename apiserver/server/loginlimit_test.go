package server

import (
	"testing"
	"time"
)

func TestLoginLimiter(t *testing.T) {
	var l loginLimiter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < loginMaxFailures-1; i++ {
		l.fail("Alice@Example.com", t0.Add(time.Duration(i)*time.Second))
	}
	if w := l.blocked("alice@example.com", t0.Add(time.Minute)); w != 0 {
		t.Fatalf("blocked after %d failures: %v", loginMaxFailures-1, w)
	}
	l.fail(" alice@example.com ", t0.Add(time.Minute))
	if w := l.blocked("ALICE@example.com", t0.Add(time.Minute)); w != loginWindow-time.Minute {
		t.Fatalf("after %d failures: wait %v, want %v", loginMaxFailures, w, loginWindow-time.Minute)
	}
	if w := l.blocked("bob@example.com", t0.Add(time.Minute)); w != 0 {
		t.Fatalf("another e-mail is blocked: %v", w)
	}
	// The oldest failure ages out of the window, and with it the block.
	if w := l.blocked("alice@example.com", t0.Add(loginWindow)); w != 0 {
		t.Fatalf("still blocked once the first failure aged out: %v", w)
	}
	l.fail("carol@example.com", t0)
	l.succeed("carol@example.com")
	if len(l.failures["carol@example.com"]) != 0 {
		t.Fatal("a successful sign-in keeps the failures")
	}
}

package server

import (
	"strings"
	"sync"
	"time"
)

// Sign-in throttling: after loginMaxFailures wrong passwords for one e-mail within loginWindow,
// further attempts for it are refused without checking the password until the window passes.
// Per process; bcrypt's cost already makes each guess slow, this caps how many one account takes.
const (
	loginMaxFailures = 10
	loginWindow      = 15 * time.Minute
)

type loginLimiter struct {
	mu       sync.Mutex
	failures map[string][]time.Time
}

func loginKey(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// blocked reports how long the e-mail must wait, zero when it may try now.
func (l *loginLimiter) blocked(email string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	recent := l.prune(loginKey(email), now)
	if len(recent) < loginMaxFailures {
		return 0
	}
	return recent[0].Add(loginWindow).Sub(now)
}

func (l *loginLimiter) fail(email string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures == nil || len(l.failures) > 100_000 {
		l.failures = map[string][]time.Time{} // bounded memory under a spray of e-mails
	}
	k := loginKey(email)
	l.failures[k] = append(l.prune(k, now), now)
}

func (l *loginLimiter) succeed(email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, loginKey(email))
}

// prune drops failures older than the window (callers hold mu).
func (l *loginLimiter) prune(k string, now time.Time) []time.Time {
	ts := l.failures[k]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= loginWindow {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(l.failures, k)
	}
	return ts
}

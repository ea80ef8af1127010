package server

import (
	"container/list"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Sign-in throttling, per process, by where the attempts come from, never by the victim alone:
// locking an e-mail after N failures from anywhere would let anyone who knows it lock its owner
// out. So:
//
//   - a source (a client address; an IPv6 /64) gets loginMaxPerSource wrong passwords per
//     loginWindow, over all e-mails (a spray from one source);
//   - a source and e-mail pair gets loginMaxFailures (guessing one account).
//
// The owner signing in from their own address is not affected by an attacker's failures. bcrypt's
// cost already makes each guess slow; these cap how many one source gets. At most loginMaxTracked
// keys are remembered: the least recently failed are forgotten first, so a spray of addresses or
// e-mails cannot wipe the counters of a source being throttled now.
const (
	loginMaxFailures  = 10
	loginMaxPerSource = 50
	loginWindow       = 15 * time.Minute
	loginMaxTracked   = 100_000
)

type loginLimiter struct {
	mu      sync.Mutex
	max     int // keys remembered; 0: loginMaxTracked
	entries map[string]*list.Element
	recent  list.List // of *loginEntry, most recently failed first
}

type loginEntry struct {
	key   string
	fails []time.Time // oldest first, at most the key's limit
}

// loginSource is the throttled unit of a client address: the address, or its /64 for IPv6 (one
// host usually holds a whole /64).
func loginSource(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func sourceKey(source string) string { return "s\x00" + loginSource(source) }

func pairKey(source, email string) string {
	return "p\x00" + loginSource(source) + "\x00" + strings.ToLower(strings.TrimSpace(email))
}

// blocked reports how long source must wait before trying email again, zero when it may now.
func (l *loginLimiter) blocked(source, email string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.wait(sourceKey(source), loginMaxPerSource, now), l.wait(pairKey(source, email), loginMaxFailures, now))
}

// fail records a wrong password for email from source.
func (l *loginLimiter) fail(source, email string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(sourceKey(source), loginMaxPerSource, now)
	l.add(pairKey(source, email), loginMaxFailures, now)
}

// succeed forgets source's failures for email; the source's count stays (a right password for
// one account does not excuse a spray over others).
func (l *loginLimiter) succeed(source, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.entries[pairKey(source, email)]; ok {
		l.remove(el)
	}
}

// wait is how long key waits: until its limit-th most recent failure leaves the window.
func (l *loginLimiter) wait(key string, limit int, now time.Time) time.Duration {
	el, ok := l.entries[key]
	if !ok {
		return 0
	}
	e := el.Value.(*loginEntry)
	e.prune(now)
	if len(e.fails) == 0 {
		l.remove(el)
		return 0
	}
	if len(e.fails) < limit {
		return 0
	}
	return e.fails[len(e.fails)-limit].Add(loginWindow).Sub(now)
}

func (l *loginLimiter) add(key string, limit int, now time.Time) {
	if l.entries == nil {
		l.entries = map[string]*list.Element{}
	}
	el, ok := l.entries[key]
	if !ok {
		el = l.recent.PushFront(&loginEntry{key: key})
		l.entries[key] = el
	} else {
		l.recent.MoveToFront(el)
	}
	e := el.Value.(*loginEntry)
	e.prune(now)
	e.fails = append(e.fails, now)
	if len(e.fails) > limit {
		e.fails = e.fails[len(e.fails)-limit:]
	}
	maxKeys := l.max
	if maxKeys <= 0 {
		maxKeys = loginMaxTracked
	}
	for len(l.entries) > maxKeys {
		l.remove(l.recent.Back())
	}
}

func (l *loginLimiter) remove(el *list.Element) {
	delete(l.entries, el.Value.(*loginEntry).key)
	l.recent.Remove(el)
}

// prune drops failures older than the window.
func (e *loginEntry) prune(now time.Time) {
	i := 0
	for i < len(e.fails) && now.Sub(e.fails[i]) >= loginWindow {
		i++
	}
	e.fails = e.fails[i:]
}

package store

import (
	"context"
	"os"
	"testing"
	"time"

	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// waitFor polls cond every 10 ms, at most 500 times.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

// A quiet listener checks its connection and keeps it (no reconnect, cache stays on), and still
// hears the next notification.
func TestListenerSurvivesQuietPeriods(t *testing.T) {
	old := listenIdle
	t.Cleanup(func() { listenIdle = old }) // runs after the listener has stopped (below)
	listenIdle = 20 * time.Millisecond
	ctx := t.Context()
	s, err := Open(ctx, pgtest.NewDatabase(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	done := make(chan struct{})
	go func() { defer close(done); s.ListenCredentials(ctx, nil) }()
	t.Cleanup(func() { <-done })
	waitFor(t, "listener connected", s.KeyCacheLive)
	pid := s.ListenerPID()

	time.Sleep(10 * listenIdle) // several idle timeouts, each followed by a ping
	if !s.KeyCacheLive() || s.ListenerPID() != pid {
		t.Fatalf("after quiet periods: live %v, pid %d (was %d)", s.KeyCacheLive(), s.ListenerPID(), pid)
	}

	s.keys.mu.Lock()
	gen := s.keys.gen
	s.keys.mu.Unlock()
	if _, err := s.Pool.Exec(context.Background(), "NOTIFY "+credentialsChannel); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "notification after quiet periods forgets the cache", func() bool {
		s.keys.mu.Lock()
		defer s.keys.mu.Unlock()
		return s.keys.gen > gen
	})
	if s.ListenerPID() != pid {
		t.Fatal("the listener reconnected to hear the notification")
	}
}

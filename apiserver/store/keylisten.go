package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// credentialsChannel is the NOTIFY channel for changes that end a cached credential's validity.
const credentialsChannel = "gpucloud_credentials"

// Listener timings: how long to wait for a notification before checking the connection is
// still there, and the reconnect backoff's bounds.
var listenIdle = 15 * time.Second // a var for the test of the quiet path

const (
	listenPing       = 5 * time.Second
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 10 * time.Second
)

// credentialsChanged tells every replica's key cache to forget, when tx commits (PostgreSQL
// delivers a NOTIFY on commit only). Call it in every transaction that revokes or deletes a key,
// disables, deletes or changes the role of a user, or suspends or deletes a tenant.
func credentialsChanged(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "NOTIFY "+credentialsChannel); err != nil {
		return fmt.Errorf("notify %s: %w", credentialsChannel, err)
	}
	return nil
}

// KeyCacheLive reports whether the credentials listener is connected, so that the key cache
// serves (for the apiserver_key_cache_listener_up gauge and tests).
func (s *Store) KeyCacheLive() bool { return s.keys.live.Load() }

// KeyCacheSize is how many keys the cache holds (expired ones included); a test hook.
func (s *Store) KeyCacheSize() int {
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	return len(s.keys.m)
}

// ListenerPID is the backend process id of the listener's connection, 0 while not connected;
// tests terminate it to simulate a lost connection.
func (s *Store) ListenerPID() uint32 { return s.listenPID.Load() }

// ListenCredentials runs the credentials listener until ctx ends: one connection of its own
// (the pool's settings) LISTENing on credentialsChannel, forgetting the key cache on every
// notification. The cache is off until it is connected and whenever the connection is lost;
// it reconnects with exponential backoff. One per Store.
func (s *Store) ListenCredentials(ctx context.Context, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	backoff := listenBackoffMin
	for {
		start := time.Now()
		err := s.listenOnce(ctx, log)
		s.keys.setLive(false)
		s.listenPID.Store(0)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > listenBackoffMax {
			backoff = listenBackoffMin // it was up a good while: this is a fresh failure
		}
		log.Warn("credentials listener disconnected; API key cache off until it reconnects",
			"err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listenOnce connects, LISTENs, turns the cache on and forgets on every notification until the
// connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context, log *slog.Logger) error {
	cfg := s.Pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "gpucloud-apiserver-credentials-listener"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenPing)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+credentialsChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+revocationsChannel); err != nil { // revocations.go
		return fmt.Errorf("listen: %w", err)
	}
	s.listenPID.Store(conn.PgConn().PID())
	s.revoked.wake("", true) // waiters that polled meanwhile re-read now that notifications flow
	// Only now: anything committed from here on is notified to us.
	s.keys.setLive(true)
	log.Info("credentials listener connected; API key cache on")
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n.Channel == revocationsChannel:
			s.revoked.wake(n.Payload, false)
		case err == nil:
			s.keys.forget()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
			// Quiet for a while: make sure the connection is still there (a timed-out wait
			// leaves it usable).
			pctx, cancel := context.WithTimeout(ctx, listenPing)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

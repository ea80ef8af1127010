package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Session revocation (issue 13, finding 2). A GPU server verifies session tokens offline, so a
// stopped or deleted instance's token would work until it expires; instead the GPU server
// long-polls its revocations (apiserver/server/revocations.go) and refuses them. Migration 00220
// NOTIFYs revocationsChannel with the GPU server's id whenever one of its instances stops or is
// deleted; the credentials listener (keylisten.go), on its one connection, wakes that GPU
// server's waiters, which re-read the whole set: level-triggered, so a lost notification or a
// reconnect costs at most one poll period (RevocationPoll).

// revocationsChannel is migration 00220's NOTIFY channel; the payload is a GPU server id.
const revocationsChannel = "gpucloud_revocations"

// RevocationPoll is how often a waiter re-reads the set while the listener is not connected
// (it may have missed a notification), well inside the one second a revocation may take.
const RevocationPoll = 250 * time.Millisecond

// Revoked is an instance whose session tokens issued at or before At are refused.
type Revoked struct {
	InstanceID uuid.UUID
	At         time.Time
}

// Revocations lists the instances placed on gpuServer that stopped or were deleted within the
// last window (the session token lifetime: an older token has expired anyway), with the time of
// each one's last such change. ErrNotFound: no such GPU server.
func (s *Store) Revocations(ctx context.Context, gpuServer uuid.UUID, window time.Duration) ([]Revoked, error) {
	rows, err := s.Pool.Query(ctx, `SELECT i.id, max(e.at) FROM instance_events e JOIN instances i ON i.id = e.instance_id
		WHERE e.to_state IN ('stopping', 'stopped', 'deleting', 'deleted') AND e.at > now() - $2::interval
		AND i.gpu_server_id = $1 GROUP BY i.id ORDER BY i.id`, gpuServer, window)
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Revoked, error) {
		var v Revoked
		err := r.Scan(&v.InstanceID, &v.At)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	if len(out) == 0 {
		var ok bool
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gpu_servers WHERE id = $1)`, gpuServer).Scan(&ok); err != nil {
			return nil, fmt.Errorf("revocations: %w", err)
		}
		if !ok {
			return nil, ErrNotFound
		}
	}
	return out, nil
}

// RevocationWait returns a channel closed at the next revocation notification for gpuServer (or
// when the listener reconnects, after which anything may have changed), and whether the listener
// is connected: when it is not, the caller must poll (RevocationPoll). cancel forgets the waiter.
func (s *Store) RevocationWait(gpuServer uuid.UUID) (wake <-chan struct{}, live bool, cancel func()) {
	ch := s.revoked.add(gpuServer)
	return ch, s.listenPID.Load() != 0, func() { s.revoked.remove(gpuServer, ch) }
}

// revocationHub holds the waiting long-polls by GPU server; the zero value is ready.
type revocationHub struct {
	mu      sync.Mutex
	waiters map[uuid.UUID]map[chan struct{}]struct{}
}

func (h *revocationHub) add(gs uuid.UUID) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters == nil {
		h.waiters = map[uuid.UUID]map[chan struct{}]struct{}{}
	}
	if h.waiters[gs] == nil {
		h.waiters[gs] = map[chan struct{}]struct{}{}
	}
	ch := make(chan struct{})
	h.waiters[gs][ch] = struct{}{}
	return ch
}

func (h *revocationHub) remove(gs uuid.UUID, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.waiters[gs][ch]; ok {
		delete(h.waiters[gs], ch)
		if len(h.waiters[gs]) == 0 {
			delete(h.waiters, gs)
		}
	}
}

// wake wakes gs's waiters (a notification's payload), or every waiter when all is true.
func (h *revocationHub) wake(payload string, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for gs, set := range h.waiters {
		if !all && gs.String() != payload {
			continue
		}
		for ch := range set {
			close(ch)
		}
		delete(h.waiters, gs)
	}
}

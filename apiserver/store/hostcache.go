package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// hostCache keeps the ids of the hosts that had room a moment ago, so that a create picks one at
// random here and reserves it with a primary-key UPDATE. Choosing in SQL (ORDER BY random() over
// the hosts that fit) scanned the whole hosts table, and its dead row versions, on every create:
// a quarter of PostgreSQL's CPU per create. A stale pick is harmless: the UPDATE re-checks that
// the host is usable and has room, and a miss sends the create to the general path, which walks
// the current candidates, and refreshes the list.
type hostCache struct {
	mu  sync.Mutex
	ids []uuid.UUID
	at  time.Time
}

const hostTTL = time.Second

// pickHost returns a random host that had room within hostTTL, or uuid.Nil when none had.
func (s *Store) pickHost(ctx context.Context) (uuid.UUID, error) {
	c := &s.hosts
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= hostTTL {
		rows, err := s.Pool.Query(ctx, `SELECT id FROM hosts WHERE status = 'ready' AND NOT cordoned AND NOT draining
			AND deleted_at IS NULL AND vcpus > used_vcpus AND memory_mib > used_memory_mib AND disk_gib > used_disk_gib`)
		if err != nil {
			return uuid.Nil, fmt.Errorf("list hosts with room: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return uuid.Nil, fmt.Errorf("list hosts with room: %w", err)
		}
		c.ids, c.at = ids, time.Now()
	}
	if len(c.ids) == 0 {
		return uuid.Nil, nil
	}
	return c.ids[rand.IntN(len(c.ids))], nil
}

// forgetHosts makes the next pick list the hosts again.
func (s *Store) forgetHosts() {
	s.hosts.mu.Lock()
	s.hosts.at = time.Time{}
	s.hosts.mu.Unlock()
}

package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Beginner is a pool, or a transaction (then Begin makes a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// flushLockSQL serialises flushes: two at once would upsert the same rollup rows and could
// deadlock; one after the other, the second finds little to do.
const flushLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('billing-rollup-flush', 0))`

// Flush moves pending usage into the hourly rollups, the tenants' and the fleet's. Run it in a
// transaction (tx) when its result must be seen together with other reads (closing a period);
// with a pool it runs on its own.
func Flush(ctx context.Context, db Beginner) (int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("rollup flush: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, flushLockSQL); err != nil {
		return 0, fmt.Errorf("rollup flush: lock: %w", err)
	}
	tag, err := tx.Exec(ctx, flushSQL)
	if err != nil {
		return 0, fmt.Errorf("rollup flush: %w", err)
	}
	if _, err := tx.Exec(ctx, flushFleetSQL); err != nil {
		return 0, fmt.Errorf("rollup flush: fleet: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("rollup flush: commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Flush moves pending usage into the hourly rollups now.
func (in *Ingester) Flush(ctx context.Context) (int64, error) { return Flush(ctx, in.pool) }

// RunRollups flushes every interval until ctx ends. The apiserver runs one per replica; the
// advisory lock makes concurrent replicas take turns.
func (in *Ingester) RunRollups(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := in.Flush(ctx); err != nil && ctx.Err() == nil {
				in.log.Error("usage rollup flush failed", "err", err)
			}
		}
	}
}

package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"gpucloud/gpuserverd/worker"
)

// A gpuserverd that adopted a worker in the middle of a move (its last server was killed after
// asking for it) waits for that move when a drain asks for the same one, instead of failing the
// drain with "a migration is already under way" (the chaos test's drains failed so 18 times in
// 29); a move elsewhere is refused naming it, and with none under way the caller asks its own.
func TestMigrateWaitsForTheMoveUnderWay(t *testing.T) {
	se := &session{ended: make(chan struct{})}
	report := func(snap worker.Snapshot) {
		se.mu.Lock()
		se.last = snap
		se.mu.Unlock()
		se.changed()
	}
	ctx := context.Background()
	if p, moved, err := se.moveUnderWay(ctx, "b:1"); p != nil || moved || err != nil {
		t.Fatalf("no move under way: %+v %v %v", p, moved, err)
	}
	report(worker.Snapshot{Migration: &worker.MigrationProgress{Target: "b:1", State: "precopy"}})
	if _, moved, err := se.moveUnderWay(ctx, "c:1"); moved || !errors.Is(err, worker.ErrNotMovable) {
		t.Fatalf("a move elsewhere under way: %v %v, want a refusal (409)", moved, err)
	}
	type result struct {
		p     *worker.MigrationProgress
		moved bool
		err   error
	}
	got := make(chan result, 1)
	go func() {
		p, moved, err := se.moveUnderWay(ctx, "b:1")
		got <- result{p, moved, err}
	}()
	time.Sleep(50 * time.Millisecond)
	report(worker.Snapshot{Migration: &worker.MigrationProgress{Target: "b:1", State: "paused"}})
	select {
	case r := <-got:
		t.Fatalf("returned while the move was still under way: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	report(worker.Snapshot{HandedOff: time.Now(), Migration: &worker.MigrationProgress{Target: "b:1", State: "done", PauseMs: 12}})
	if r := <-got; !r.moved || r.err != nil || r.p.PauseMs != 12 {
		t.Fatalf("after the move under way ended: %+v", r)
	}
	// A move that failed leaves the caller to ask for its own.
	report(worker.Snapshot{Migration: &worker.MigrationProgress{Target: "b:1", State: "failed"}})
	if p, moved, err := se.moveUnderWay(ctx, "b:1"); p != nil || moved || err != nil {
		t.Fatalf("after a failed move: %+v %v %v", p, moved, err)
	}
}

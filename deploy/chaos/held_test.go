package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

// heldTimeMismatches compares, for every instance, the time billing's allocation intervals say
// it held its GPU, its VM and its root disk with the time its recorded state transitions say, to
// the second: held from entering running until entering stopped, deleted or failed (the disk:
// until deleted or failed). Kills of any daemon at any moment must neither lose nor double a
// second; an instance still holding must have exactly one open interval per kind.
func (p *platform) heldTimeMismatches(ctx context.Context, t *testing.T) []string {
	t.Helper()
	type key struct {
		inst uuid.UUID
		kind string
	}
	want := map[key]time.Duration{}
	wantOpen := map[key]bool{}
	rows, err := p.st.Pool.Query(ctx, `SELECT e.instance_id, e.to_state, e.at, i.gpu_count FROM instance_events e
		JOIN instances i ON i.id = e.instance_id ORDER BY e.instance_id, e.id`)
	if err != nil {
		t.Fatal(err)
	}
	since := map[key]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var to string
		var at time.Time
		var gpus int
		if err := rows.Scan(&id, &to, &at, &gpus); err != nil {
			t.Fatal(err)
		}
		at = at.Truncate(time.Second)
		kinds := []string{"vm", "storage"}
		if gpus > 0 {
			kinds = append(kinds, "gpu")
		}
		for _, k := range kinds {
			kk := key{id, k}
			_, held := since[kk]
			ends := to == "deleted" || to == "failed" || (to == "stopped" && k != "storage")
			switch {
			case to == "running" && !held:
				since[kk] = at
			case ends && held:
				want[kk] += at.Sub(since[kk])
				delete(since, kk)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range since {
		wantOpen[k] = true
	}
	got := map[key]time.Duration{}
	gotOpen := map[key]int{}
	rows, err = p.st.Pool.Query(ctx, `SELECT instance_id, kind, started_at, ended_at FROM billing_allocations`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k key
		var start time.Time
		var end *time.Time
		if err := rows.Scan(&k.inst, &k.kind, &start, &end); err != nil {
			t.Fatal(err)
		}
		if end == nil {
			gotOpen[k]++
			continue
		}
		got[k] += end.Sub(start)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var bad []string
	for k, d := range want {
		if got[k] != d {
			bad = append(bad, fmt.Sprintf("instance %s %s: held %s by its transitions, billed %s", k.inst, k.kind, d, got[k]))
		}
	}
	for k, d := range got {
		if _, ok := want[k]; !ok && d != 0 {
			bad = append(bad, fmt.Sprintf("instance %s %s: billed %s it never held", k.inst, k.kind, d))
		}
	}
	for k := range wantOpen {
		if gotOpen[k] != 1 {
			bad = append(bad, fmt.Sprintf("instance %s %s: still held, %d open intervals", k.inst, k.kind, gotOpen[k]))
		}
	}
	for k, n := range gotOpen {
		if !wantOpen[k] {
			bad = append(bad, fmt.Sprintf("instance %s %s: %d open intervals for nothing held", k.inst, k.kind, n))
		}
	}
	return bad
}

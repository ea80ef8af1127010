package meter_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/meter"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A volume's storage is held once however often Hold is replayed, released once, dated to the
// second; a second Hold after the release opens a new interval.
func TestVolumeStorageHeldOnce(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	tenant, inst := uuid.New(), uuid.New()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 500_000_000, time.UTC)
	for range 3 {
		if err := meter.Hold(ctx, pool, tenant, inst, "vol-1", 50, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := meter.Hold(ctx, pool, tenant, inst, "vol-2", 0, t0); err == nil {
		t.Fatal("a 0 GiB volume held")
	}
	for range 2 {
		if err := meter.Release(ctx, pool, "vol-1", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := meter.Hold(ctx, pool, tenant, inst, "vol-1", 50, t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT quantity, started_at, ended_at FROM billing_allocations WHERE resource_id = 'vol-1' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var q int64
		var s time.Time
		var e *time.Time
		if err := rows.Scan(&q, &s, &e); err != nil {
			t.Fatal(err)
		}
		end := "open"
		if e != nil {
			end = e.UTC().Format(time.TimeOnly)
		}
		got = append(got, s.UTC().Format(time.TimeOnly)+"-"+end)
		if q != 50*1024 {
			t.Fatalf("quantity %d MiB, want 50 GiB", q)
		}
	}
	if len(got) != 2 || got[0] != "10:00:00-11:00:00" || got[1] != "12:00:00-open" {
		t.Fatalf("intervals %v", got)
	}
}

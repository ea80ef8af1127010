package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
)

// A batch of new ids takes the fast path (COPY, rollup pieces summed in Go); a batch
// holding a stored id takes the ON CONFLICT path (pieces summed in SQL). Both must give the same
// rollups to the millisecond, including VM records and intervals crossing hours and months.
func TestFastAndDuplicatePathsRollUpAlike(t *testing.T) {
	ctx := context.Background()
	g := billingtest.NewGenerator(7, 5, march, "paths")
	batch := g.Batch(400)
	tenant := uuid.New()
	batch.Records = append(batch.Records,
		billingtest.VM("vm-long", tenant, march.Add(3*time.Hour+17*time.Minute+5*time.Millisecond), 23*time.Hour+59*time.Minute),
		billingtest.VM("vm-month-end", tenant, march.AddDate(0, 1, 0).Add(-90*time.Minute+time.Millisecond), 3*time.Hour),
		billingtest.GPU("gpu-month-end", tenant, march.AddDate(0, 1, 0).Add(-time.Second), 2*time.Hour))

	fast, fastPool := newIngester(t)
	res, err := fast.Ingest(ctx, batch, nil)
	if err != nil || res.Accepted != len(batch.Records) || res.Duplicates != 0 {
		t.Fatalf("fast path: %+v, %v", res, err)
	}
	slow, slowPool := newIngester(t)
	if _, err := slow.Ingest(ctx, api.UsageBatch{Records: batch.Records[:1]}, nil); err != nil {
		t.Fatal(err)
	}
	res, err = slow.Ingest(ctx, batch, nil)
	if err != nil || res.Accepted != len(batch.Records)-1 || res.Duplicates != 1 {
		t.Fatalf("duplicate path: %+v, %v", res, err)
	}
	got, want := rollups(t, fastPool), rollups(t, slowPool)
	if len(got) < len(batch.Records)/2 {
		t.Fatalf("only %d rollup rows", len(got))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("rollup %d: fast path %s, duplicate path %s", i, got[i], want[i])
			}
		}
		t.Fatalf("fast path %d rollup rows, duplicate path %d", len(got), len(want))
	}
}

func rollups(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	count(t, pool, `SELECT 0`) // flushes
	// Summed per key: the same key may stand in the hourly rollups and their direct child.
	rows, err := pool.Query(context.Background(), `SELECT concat_ws(' ', tenant_id, booked_period, adjustment,
		hour AT TIME ZONE 'UTC', kind, tier, gpu_model, instance_type, sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records))
		FROM billing_usage_hourly GROUP BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
)

// The rollup flush reads records by transaction: one still running at a flush (here: an older
// transaction committing after a newer batch was flushed) is added by a later flush, exactly
// once; an aborted one never.
func TestFlushWatermarkCatchesLateCommits(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	tenant := uuid.New()
	insert := `INSERT INTO billing_usage_records (id, kind, source, tenant_id, instance_id, start_at,
		end_at, gpu_model, tier, gpu_count, booked_period) VALUES ($1, 'gpu', 'test', $2, 'i', $3,
		$3::timestamptz + interval '1 minute', 'H100', 'dedicated', 1, '2026-03-01')`
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := late.Exec(ctx, insert, "late", tenant, march.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	aborted, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aborted.Exec(ctx, insert, "aborted", tenant, march.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := billingtest.GPU("newer", tenant, march.Add(3*time.Hour), time.Minute)
	if _, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{r}}, nil); err != nil {
		t.Fatal(err)
	}
	recs := `SELECT coalesce(sum(records), 0) FROM billing_usage_hourly`
	if n := count(t, pool, recs); n != 1 {
		t.Fatalf("%d records rolled up while the older transaction runs, want 1", n)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second flush must add nothing
		if n := count(t, pool, recs); n != 2 {
			t.Fatalf("flush %d: %d records rolled up, want 2", i, n)
		}
	}
	if ms := count(t, pool, `SELECT sum(gpu_ms) FROM billing_usage_hourly`); ms != 2*60000 {
		t.Fatalf("%d GPU-ms rolled up, want %d", ms, 2*60000)
	}
}

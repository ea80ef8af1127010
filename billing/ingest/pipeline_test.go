package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
)

// spreadBatch is n records of 10 minutes, each for its own tenant (a spread batch: as many
// rollup pieces as records), ids prefix-0000..
func spreadBatch(prefix string, n int) []api.UsageRecord {
	recs := make([]api.UsageRecord, n)
	for i := range recs {
		recs[i] = billingtest.GPU(fmt.Sprintf("%s-%04d", prefix, i), uuid.New(), march.Add(time.Duration(i)*time.Minute), 10*time.Minute)
	}
	return recs
}

// A full batch goes to the server as several COPY statements written at once. A stored id in its
// last statement fails the whole transaction, the COPYs before it included: the batch then lands
// once on the duplicate path, every millisecond counted once.
func TestDuplicateInALaterCopyStatementRollsBackTheEarlierOnes(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	recs := spreadBatch("batch", ingest.MaxBatch)
	last := recs[len(recs)-1:] // the batch's last id, stored first
	if res, err := in.Ingest(ctx, api.UsageBatch{Records: last}, nil); err != nil || res.Accepted != 1 {
		t.Fatalf("the last record alone: %+v, %v", res, err)
	}
	res, err := in.Ingest(ctx, api.UsageBatch{Records: recs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != ingest.MaxBatch-1 || res.Duplicates != 1 {
		t.Fatalf("the batch: %+v, want %d accepted and 1 duplicate", res, ingest.MaxBatch-1)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != ingest.MaxBatch {
		t.Fatalf("%d raw rows, want %d", n, ingest.MaxBatch)
	}
	if ms := count(t, pool, `SELECT sum(gpu_ms) FROM billing_usage_hourly`); ms != ingest.MaxBatch*10*60*1000 {
		t.Fatalf("rollups hold %d GPU-ms, want %d", ms, ingest.MaxBatch*10*60*1000)
	}
	if n := count(t, pool, `SELECT sum(records) FROM billing_usage_fleet`); n != ingest.MaxBatch {
		t.Fatalf("fleet rollups count %d records, want %d", n, ingest.MaxBatch)
	}
}

// A batch whose context ends while it waits (here on a tenant's lock, held by a close) fails
// with the context's error, stores nothing, and the ingester goes on working.
func TestCanceledBatchStoresNothing(t *testing.T) {
	in, pool := newIngester(t)
	recs := spreadBatch("canceled", 10)
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after the test
	if _, err := tx.Exec(context.Background(), ingest.LockTenantSQL, uuid.MustParse(recs[0].TenantID)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := in.Ingest(ctx, api.UsageBatch{Records: recs}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ingest under a held lock: %v, want the context's deadline", err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a batch that went on regardless would commit now
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != 0 {
		t.Fatalf("%d raw rows after a canceled batch, want 0", n)
	}
	res, err := in.Ingest(context.Background(), api.UsageBatch{Records: recs}, nil)
	if err != nil || res.Accepted != len(recs) {
		t.Fatalf("the same batch again: %+v, %v", res, err)
	}
}

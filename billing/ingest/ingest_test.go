package ingest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func newIngester(t *testing.T) (*ingest.Ingester, *pgxpool.Pool) {
	return newIngesterOn(t, billingtest.Pool(t, pgtest.NewDatabase(t)))
}

// newIngesterOn returns an ingester on pool, as another apiserver replica would have.
func newIngesterOn(t *testing.T, pool *pgxpool.Pool) (*ingest.Ingester, *pgxpool.Pool) {
	t.Helper()
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC) })
	return in, pool
}

// count runs a counting query after flushing pending usage into the rollups.
func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int64 {
	t.Helper()
	if _, err := ingest.Flush(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestDuplicatesCountedOnce(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	tenant := uuid.New()
	a := billingtest.GPU("a", tenant, march.Add(time.Hour), 10*time.Minute)
	b := billingtest.GPU("b", tenant, march.Add(2*time.Hour), 20*time.Minute)

	res, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{a, b, a}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 2 || res.Duplicates != 1 || len(res.Rejected) != 0 {
		t.Fatalf("first batch: %+v, want 2 accepted 1 duplicate", res)
	}
	res, err = in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{b, a}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 0 || res.Duplicates != 2 {
		t.Fatalf("replayed batch: %+v, want 0 accepted 2 duplicates", res)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != 2 {
		t.Fatalf("%d raw rows, want 2", n)
	}
	if ms := count(t, pool, `SELECT sum(gpu_ms) FROM billing_usage_hourly`); ms != 30*60*1000 {
		t.Fatalf("rollup holds %d GPU-ms, want %d", ms, 30*60*1000)
	}
}

// Several daemons retrying the same records at once: each record still counts once.
func TestDuplicatesAcrossConcurrentBatches(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	g := billingtest.NewGenerator(7, 5, march, "conc")
	recs := g.Batch(400).Records
	var want int64
	for _, r := range recs {
		want += int64(r.GPUCount) * r.End.Sub(r.Start).Milliseconds()
	}

	const workers = 6
	var wg sync.WaitGroup
	// Rollup flushes run all along: pending usage must move into the rollups exactly once.
	stopFlush := make(chan struct{})
	flushed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopFlush:
				flushed <- nil
				return
			default:
			}
			if _, err := in.Flush(ctx); err != nil {
				flushed <- err
				return
			}
		}
	}()
	results := make([]api.UsageBatchResult, workers)
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Each worker sends the records in a different order, in overlapping batches.
			batch := make([]api.UsageRecord, 0, len(recs))
			for i := range recs {
				batch = append(batch, recs[(i*(w+1)+w)%len(recs)])
			}
			results[w], errs[w] = in.Ingest(ctx, api.UsageBatch{Records: batch}, nil)
		}(w)
	}
	wg.Wait()
	close(stopFlush)
	if err := <-flushed; err != nil {
		t.Fatalf("flush: %v", err)
	}
	accepted := 0
	for w := range results {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		accepted += results[w].Accepted
		if results[w].Accepted+results[w].Duplicates != len(recs) {
			t.Fatalf("worker %d: %+v does not account for %d records", w, results[w], len(recs))
		}
	}
	distinct := map[string]bool{}
	for _, r := range recs {
		distinct[r.ID] = true
	}
	if accepted != len(distinct) {
		t.Fatalf("accepted %d in total, want %d", accepted, len(distinct))
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != int64(len(distinct)) {
		t.Fatalf("%d raw rows, want %d", n, len(distinct))
	}
	if ms := count(t, pool, `SELECT sum(gpu_ms) FROM billing_usage_hourly`); ms != want {
		t.Fatalf("rollup holds %d GPU-ms, want %d", ms, want)
	}
	if n := count(t, pool, `SELECT sum(records) FROM billing_usage_hourly`); n != int64(len(distinct)) {
		t.Fatalf("rollup counts %d records, want %d", n, len(distinct))
	}
}

func TestMalformedRejectedRestLands(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	tenant := uuid.New()
	good1 := billingtest.GPU("good-1", tenant, march, time.Minute)
	good2 := billingtest.VM("good-2", tenant, march, time.Hour)
	badTenant := billingtest.GPU("bad-tenant", tenant, march, time.Minute)
	badTenant.TenantID = "acme"
	backwards := billingtest.GPU("backwards", tenant, march, -time.Minute)
	badTier := billingtest.GPU("bad-tier", tenant, march, time.Minute)
	badTier.Tier = "gold"
	sharedNoQuota := billingtest.GPU("shared-no-quota", tenant, march, time.Minute)
	sharedNoQuota.Tier = "shared"

	res, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{badTenant, good1, backwards, badTier, good2, sharedNoQuota}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 2 {
		t.Fatalf("accepted %d, want 2: %+v", res.Accepted, res)
	}
	want := map[int]string{0: "tenant_id", 2: "end", 3: "tier", 5: "memory_quota"}
	if len(res.Rejected) != len(want) {
		t.Fatalf("rejected %+v, want indexes %v", res.Rejected, want)
	}
	for _, rj := range res.Rejected {
		field, ok := want[rj.Index]
		if !ok || !strings.HasPrefix(rj.Reason, field+":") {
			t.Errorf("rejection %+v: want reason about %q", rj, field)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records WHERE id IN ('good-1','good-2')`); n != 2 {
		t.Fatalf("%d good rows stored, want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != 2 {
		t.Fatalf("%d rows stored, want only the 2 good ones", n)
	}
}

func TestBatchTooLargeStoresNothing(t *testing.T) {
	in, pool := newIngester(t)
	g := billingtest.NewGenerator(1, 1, march, "big")
	if _, err := in.Ingest(context.Background(), g.Batch(ingest.MaxBatch+1), nil); err != ingest.ErrBatchTooLarge {
		t.Fatalf("err = %v, want ErrBatchTooLarge", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_records`); n != 0 {
		t.Fatalf("%d rows stored from a refused batch", n)
	}
}

func TestAcceptHookRefuses(t *testing.T) {
	in, _ := newIngester(t)
	tenant := uuid.New()
	r := billingtest.GPU("x", tenant, march, time.Minute)
	res, err := in.Ingest(context.Background(), api.UsageBatch{Records: []api.UsageRecord{r}},
		func(int, api.UsageRecord) string { return "source: not yours" })
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 0 || len(res.Rejected) != 1 || res.Rejected[0].Reason != "source: not yours" {
		t.Fatalf("%+v, want the record refused by the hook", res)
	}
}

// An interval crossing hours lands in both hourly rollups, split exactly.
func TestRollupSplitsHours(t *testing.T) {
	in, pool := newIngester(t)
	tenant := uuid.New()
	start := march.Add(10*time.Hour + 50*time.Minute + 123*time.Millisecond)
	r := billingtest.GPU("split", tenant, start, 25*time.Minute)
	r.GPUCount = 2
	if _, err := in.Ingest(context.Background(), api.UsageBatch{Records: []api.UsageRecord{r}}, nil); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_pending`); n != 0 {
		t.Fatalf("%d pending rows after a flush", n)
	}
	rows, err := pool.Query(context.Background(), `SELECT hour, sum(gpu_ms), sum(records) FROM billing_usage_hourly GROUP BY hour ORDER BY hour`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var h time.Time
		var ms, n int64
		if err := rows.Scan(&h, &ms, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d %d", h.UTC().Format("15:04"), ms, n))
	}
	want := []string{"10:00 1199754 1", "11:00 1800246 0"} // 2 x 9m59.877s and 2 x 15m0.123s
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rollups %v, want %v", got, want)
	}
}

// A batch arriving while its tenant's period is being closed waits for the close, then sees the
// period closed and books the record as an adjustment: never into an invoice already computed.
func TestIngestWaitsForClose(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	tenant := uuid.New()
	closer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Rollback(ctx) //nolint:errcheck
	if _, err := closer.Exec(ctx, ingest.LockTenantSQL, tenant); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{billingtest.GPU("racing", tenant, march.Add(time.Hour), time.Minute)}}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("ingest finished while the tenant was locked for closing: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The "close": an invoice for March, closed in the transaction that holds the lock.
	var id uuid.UUID
	if err := closer.QueryRow(ctx, `INSERT INTO billing_invoices (tenant_id, period) VALUES ($1, $2) RETURNING id`, tenant, march).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := closer.Exec(ctx, `UPDATE billing_invoices SET status = 'closed', closed_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := closer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ingest still waiting after the close committed")
	}
	var booked time.Time
	var adj bool
	if err := pool.QueryRow(ctx, `SELECT booked_period, adjustment FROM billing_usage_records WHERE id = 'racing'`).Scan(&booked, &adj); err != nil {
		t.Fatal(err)
	}
	if !booked.Equal(march.AddDate(0, 1, 0)) || !adj {
		t.Fatalf("record booked %s adjustment=%v, want an April adjustment", booked.Format("2006-01"), adj)
	}
}

// Booking over several tenants in one batch: a month closed for one tenant sends its records to
// the first open month after it (past a run of closed months), while another tenant's records of
// the same month stay in it, and a third tenant's open month between closed ones is used.
func TestBookingSkipsClosedMonthsPerTenant(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	twoClosed, open, gap := uuid.New(), uuid.New(), uuid.New()
	for _, c := range []struct {
		tenant uuid.UUID
		month  time.Time
	}{{twoClosed, march}, {twoClosed, march.AddDate(0, 1, 0)}, {gap, march}, {gap, march.AddDate(0, 2, 0)}} {
		if _, err := pool.Exec(ctx, `INSERT INTO billing_invoices (tenant_id, period, status, closed_at) VALUES ($1, $2, 'closed', now())`, c.tenant, c.month); err != nil {
			t.Fatal(err)
		}
	}
	recs := []api.UsageRecord{
		billingtest.GPU("two-closed", twoClosed, march.Add(time.Hour), time.Minute),
		billingtest.GPU("open", open, march.Add(time.Hour), time.Minute),
		billingtest.GPU("gap", gap, march.Add(time.Hour), time.Minute),
	}
	if res, err := in.Ingest(ctx, api.UsageBatch{Records: recs}, nil); err != nil || res.Accepted != 3 {
		t.Fatalf("ingest: %+v, %v", res, err)
	}
	want := map[string]string{"two-closed": "2026-05 true", "open": "2026-03 false", "gap": "2026-04 true"}
	for id, w := range want {
		var booked time.Time
		var adj bool
		if err := pool.QueryRow(ctx, `SELECT booked_period, adjustment FROM billing_usage_records WHERE id = $1`, id).Scan(&booked, &adj); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s %v", booked.Format("2006-01"), adj); got != w {
			t.Errorf("%s booked %s, want %s", id, got, w)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_hourly WHERE booked_period = '2026-05-01' AND adjustment AND tenant_id = $1`, twoClosed); n != 1 {
		t.Fatalf("%d May adjustment rollups for the tenant with March and April closed, want 1", n)
	}
}

// A batch spread over many rollup keys (here one tenant each) is appended to the direct rollups;
// one that compresses (one tenant, one hour) waits in the pending table for the flush. Either way
// every millisecond is counted once.
func TestSpreadBatchesSkipPending(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	var spread, dense []api.UsageRecord
	one := uuid.New()
	for i := range 10 {
		spread = append(spread, billingtest.GPU(fmt.Sprintf("spread-%d", i), uuid.New(), march.Add(time.Hour), time.Minute))
		dense = append(dense, billingtest.GPU(fmt.Sprintf("dense-%d", i), one, march.Add(2*time.Hour+time.Duration(i)*time.Minute), time.Minute))
	}
	pending := func() (n int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM billing_usage_pending`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if res, err := in.Ingest(ctx, api.UsageBatch{Records: spread}, nil); err != nil || res.Accepted != 10 {
		t.Fatalf("spread batch: %+v, %v", res, err)
	}
	var direct int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM billing_usage_direct`).Scan(&direct); err != nil {
		t.Fatal(err)
	}
	if p := pending(); p != 0 || direct != 10 {
		t.Fatalf("spread batch: %d pending rows, %d direct rollup rows before any flush; want 0 and 10", p, direct)
	}
	if res, err := in.Ingest(ctx, api.UsageBatch{Records: dense}, nil); err != nil || res.Accepted != 10 {
		t.Fatalf("dense batch: %+v, %v", res, err)
	}
	if p := pending(); p != 1 {
		t.Fatalf("dense batch: %d pending rows, want 1 (ten records of one key)", p)
	}
	if ms := count(t, pool, `SELECT sum(gpu_ms) FROM billing_usage_hourly`); ms != 20*60*1000 {
		t.Fatalf("rollups hold %d GPU-ms after the flush, want %d", ms, 20*60*1000)
	}
	if n := count(t, pool, `SELECT sum(records) FROM billing_usage_hourly`); n != 20 {
		t.Fatalf("rollups count %d records, want 20", n)
	}
}

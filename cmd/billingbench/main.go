// Command billingbench measures billing's goals: ingesting usage records in batches of 1,000
// (records per second; issue 17: >= 100,000, at 10,000 tenants too), a one-month per-tier
// GPU-hours report over them (< 1 s), and with -close the month's close for every tenant
// (10,000 tenants in < 60 s). Without -url it starts its own durable PostgreSQL cluster in a
// temporary folder and prints CPU time per record beside wall-clock rates. Results and how to
// compare two commits: docs/benchmarks/billing-*.md.
//
//	go run ./cmd/billingbench -count 1000000 -tenants 10000 -reports 0
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for the migrations

	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/internal/cputime"
	"gpucloud/migrations"
)

func main() {
	var (
		url        = flag.String("url", "", "PostgreSQL URL of an empty database (default: start a private cluster)")
		count      = flag.Int("count", 10_000_000, "records to ingest")
		batch      = flag.Int("batch", 1000, "records per batch (at most 1000)")
		workers    = flag.Int("workers", 4, "concurrent ingesting connections")
		tenants    = flag.Int("tenants", 100, "tenants the records spread over")
		seed       = flag.Uint64("seed", 1, "random seed")
		ephemeral  = flag.Bool("ephemeral", false, "private cluster without fsync (flatters ingestion; default is durable)")
		reports    = flag.Int("reports", 5, "report runs to time")
		ordered    = flag.Bool("ordered", true, "records in time order, as daemons send them (false: anywhere in the month)")
		flushEvery = flag.Duration("flush", time.Second, "rollup flush interval during ingestion")
		cpuProfile = flag.String("cpuprofile", "", "write the bench's own CPU profile (pprof) to this file")
		memProfile = flag.String("memprofile", "", "write the bench's allocation profile (pprof) to this file at the end")
		closeAll   = flag.Bool("close", false, "then close the month for every tenant (allocations written for each) and time it")
		byTenant   = flag.Bool("tenant-report", true, "also time the per-tenant per-day report (at 10,000 tenants: ~300,000 rows, minutes on a loaded machine)")
		synthetic  = flag.Int("synthetic-rollups", 0, "instead of ingesting, write this many hourly rollup rows straight (to time -close over a month of that size)")
		wire       = flag.Bool("wire", true, "send each batch as daemons do, in the binary usage form (encoded before the clock starts, decoded in the timed part); false: generate the records in the timed part")
		pgConf     = flag.String("pg-conf", "", "comma-separated name=value server settings for the private cluster (ALTER SYSTEM, then a restart), e.g. max_wal_size=4GB")
	)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "billingbench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer func() {
			f, err := os.Create(*memProfile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "billingbench: -memprofile:", err)
			}
		}()
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *url, *count, *batch, *workers, *tenants, *seed, *ephemeral, *pgConf, *wire, *reports, *ordered, *flushEvery, *closeAll, *synthetic, *byTenant); err != nil {
		fmt.Fprintln(os.Stderr, "billingbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, count, batch, workers, tenants int, seed uint64, ephemeral bool, pgConf string, wire bool, reports int, ordered bool, flushEvery time.Duration, closeAll bool, synthetic int, byTenant bool) error {
	if synthetic > 0 {
		count = 0
	}
	if batch < 1 || batch > ingest.MaxBatch || (count < 1 && synthetic == 0) || workers < 1 || tenants < 1 {
		return fmt.Errorf("need 1 <= -batch <= %d, -count, -workers, -tenants >= 1", ingest.MaxBatch)
	}
	dataDir := "" // known when the cluster is ours: then its CPU time is measured
	if url == "" {
		dir, err := os.MkdirTemp("", "billingbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cluster, err := startCluster(ctx, dir, ephemeral, pgConf)
		if err != nil {
			return err
		}
		defer cluster.Stop(context.Background()) //nolint:errcheck // best effort on the way out
		url = cluster.URL("postgres")
		dataDir = cluster.DataDir()
	}
	if err := migrate(ctx, url); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	cfg.MaxConns = int32(workers + 1)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := addPrices(ctx, pool, month); err != nil {
		return err
	}
	if synthetic > 0 {
		if err := synthesize(ctx, pool, month, tenants, synthetic); err != nil {
			return err
		}
	}
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return month.AddDate(0, 2, 0) })

	flushCtx, stopFlush := context.WithCancel(ctx)
	flushDone := make(chan struct{})
	go func() { in.RunRollups(flushCtx, flushEvery); close(flushDone) }()
	fmt.Printf("ingesting %d records, batches of %d, %d workers, %d tenants\n", count, batch, workers, tenants)
	var done, dups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	if wire {
		encodeAll(seed, tenants, month, count, workers, batch, ordered)
	}
	start := time.Now()
	cpuGo0, cpuPG0 := cputime.Self(), cputime.PostgresServer(dataDir)
	var mem0 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	go func() {
		for range progress.C {
			n := done.Load()
			fmt.Printf("  %d records, %.0f records/s\n", n, float64(n)/time.Since(start).Seconds())
		}
	}()
	for w := 0; w < workers; w++ {
		share := shareOf(count, workers, w)
		wg.Add(1)
		go func(w, share int) {
			defer wg.Done()
			next := records(seed, tenants, month, w, share, batch, ordered, wire)
			for share > 0 && ctx.Err() == nil {
				b, err := next()
				if err != nil {
					errs <- err
					return
				}
				res, err := in.Ingest(ctx, b, nil)
				if err != nil {
					errs <- err
					return
				}
				if len(res.Rejected) > 0 {
					errs <- fmt.Errorf("record rejected: %+v", res.Rejected[0])
					return
				}
				done.Add(int64(res.Accepted))
				dups.Add(int64(res.Duplicates))
				share -= len(b.Records)
			}
		}(w, share)
	}
	wg.Wait()
	progress.Stop()
	stopFlush()
	<-flushDone
	// The last flush is part of ingestion: the records are not in the rollups before it.
	if _, err := in.Flush(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpuGo, cpuPG := cputime.Self()-cpuGo0, cputime.PostgresServer(dataDir)-cpuPG0
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n := done.Load()
	fmt.Printf("ingested %d records (%d duplicates) in %s: %.0f records/s\n", n, dups.Load(), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	fmt.Printf("Go heap per record: %.0f bytes in %.1f allocations; %d GCs\n", float64(mem.TotalAlloc-mem0.TotalAlloc)/float64(n),
		float64(mem.Mallocs-mem0.Mallocs)/float64(n), mem.NumGC-mem0.NumGC)
	if cpuPG > 0 {
		cpu := cpuGo + cpuPG
		fmt.Printf("CPU: bench %s + postgres %s = %s; %.0f records per CPU-second, so %.0f records/s on 2 idle cores\n",
			cpuGo.Round(time.Millisecond), cpuPG.Round(time.Millisecond), cpu.Round(time.Millisecond),
			float64(n)/cpu.Seconds(), 2*float64(n)/cpu.Seconds())
	}

	var rollups int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM billing_usage_hourly`).Scan(&rollups); err != nil {
		return fmt.Errorf("count rollups: %w", err)
	}
	for _, t := range []string{"billing_usage_hourly", "billing_usage_direct", "billing_usage_fleet"} {
		if !tableExists(ctx, pool, t) { // older code (scripts/bench-billing-ab.sh)
			continue
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+t); err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	fmt.Printf("rollup rows (hourly and direct): %d\n", rollups)
	rep := report.New(pool)
	queries := []report.Query{
		{From: month, To: month.AddDate(0, 1, 0), GroupBy: "tier", Granularity: "month"},
		{From: month, To: month.AddDate(0, 1, 0), GroupBy: "tenant", Granularity: "day"},
	}
	if !byTenant {
		queries = queries[:1]
	}
	if reports < 1 {
		queries = nil // -reports 0: none
	}
	for _, q := range queries {
		var times []time.Duration
		var last report.Report
		for i := 0; i < reports; i++ {
			t0 := time.Now()
			r, err := rep.GPUHours(ctx, q)
			if err != nil {
				return err
			}
			times = append(times, time.Since(t0))
			last = r
		}
		first := times[0]
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		fmt.Printf("one-month report group_by=%s granularity=%s: %d rows, %s GPU-hours, revenue %s %s; first %s, median %s of %d runs\n",
			q.GroupBy, q.Granularity, len(last.Rows), last.Total.GPUHours, last.Total.Revenue, last.Currency,
			first.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), len(times))
	}
	if reports > 0 {
		if err := timeTenantUsage(ctx, rep, tenants, seed, month, reports); err != nil {
			return err
		}
	}
	if closeAll {
		return closeMonth(ctx, pool, month, workers)
	}
	return nil
}

func migrate(ctx context.Context, url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer db.Close()
	return migrations.Up(ctx, db)
}

// addPrices prices every model and tier so the report's revenue column is real work.
func addPrices(ctx context.Context, pool *pgxpool.Pool, month time.Time) error {
	book := rating.NewBook(pool)
	for i, m := range billingtest.Models {
		for _, tier := range billingtest.Tiers {
			for k, from := range []time.Time{month.AddDate(-1, 0, 0), month.AddDate(0, 0, 14)} {
				micros := int64(1_000_000*(i+1) + 250_000*k)
				if tier == "shared" {
					micros /= 60
				}
				if _, err := book.Add(ctx, rating.Price{Kind: "gpu", GPUModel: m, Tier: tier, UnitPriceMicros: micros, EffectiveFrom: from}); err != nil && !errors.Is(err, rating.ErrPriceExists) {
					return fmt.Errorf("add price: %w", err)
				}
			}
		}
	}
	return nil
}

// timeTenantUsage times one tenant's usage over the month by day (the console's usage page), for
// the generator's first tenant.
func timeTenantUsage(ctx context.Context, rep *report.Reporter, tenants int, seed uint64, month time.Time, runs int) error {
	tenant := billingtest.NewGenerator(seed, tenants, month, "").Tenants[0]
	var times []time.Duration
	var rows []report.UsageRow
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		r, err := rep.TenantUsage(ctx, tenant, month, month.AddDate(0, 1, 0), "day")
		if err != nil {
			return err
		}
		times = append(times, time.Since(t0))
		rows = r
	}
	var ms int64
	for _, r := range rows {
		ms += r.GPUMs
	}
	first := times[0]
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("one tenant's usage over the month by day: %d rows, %s GPU-hours; first %s, median %s of %d runs\n",
		len(rows), report.Hours(ms), first.Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), len(times))
	return nil
}

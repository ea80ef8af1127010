// Command apiload drives an apiserver with concurrent clients creating instances and prints the
// create rate and latency percentiles.
//
//	apiload -local                                  # fresh PostgreSQL + apiserver, seeded, then load
//	apiload -url http://h:8080 -keys k1,k2 -type ID # an apiserver already running
//
// With -local the apiserver runs in this process on a loopback port (its HTTP stack, its
// database pool, PostgreSQL in a temporary folder), so the figures include the whole request
// path; the load generator shares the machine's cores with it.
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/cputime"
	"gpucloud/internal/pglocal"
	"gpucloud/migrations"

	_ "github.com/jackc/pgx/v5/stdlib"
)

type config struct {
	url, typ    string
	pgDir       string // with -local: the cluster's data folder, to account its CPU time
	keys        []string
	clients     int
	duration    time.Duration
	idempotency bool
}

func main() {
	var (
		cfg       config
		keys      string
		local     bool
		durable   bool
		tenants   int
		tier      string
		poolConns int
	)
	flag.StringVar(&cfg.url, "url", "", "apiserver base URL (without -local)")
	flag.StringVar(&keys, "keys", "", "comma-separated tenant API keys; clients take them in turn (without -local)")
	flag.StringVar(&cfg.typ, "type", "", "instance type id to create (without -local)")
	flag.IntVar(&cfg.clients, "c", 32, "concurrent clients")
	flag.DurationVar(&cfg.duration, "d", 10*time.Second, "how long to drive load")
	flag.BoolVar(&cfg.idempotency, "idempotency", true, "send an Idempotency-Key with every create")
	flag.BoolVar(&local, "local", false, "start a fresh PostgreSQL and apiserver, seed them, and load that")
	flag.BoolVar(&durable, "durable", true, "with -local: PostgreSQL with fsync on (off is faster, not production)")
	flag.IntVar(&tenants, "tenants", 8, "with -local: tenants to spread the clients over")
	flag.StringVar(&tier, "tier", "shared", "with -local: instance tier, shared (GPU slice), dedicated (whole GPU) or none (CPU only)")
	flag.IntVar(&poolConns, "pool", 32, "with -local: apiserver database pool size")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (with -local: server and clients)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apiload:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, keys, local, durable, tenants, tier, int32(poolConns)); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, keys string, local, durable bool, tenants int, tier string, pool int32) error {
	if local {
		dir, err := os.MkdirTemp("", "apiload-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cluster, err := pglocal.Start(ctx, dir, pglocal.Options{Ephemeral: !durable})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cluster.Stop(sctx)
		}()
		dbURL := cluster.URL("postgres")
		if err := migrate(ctx, dbURL); err != nil {
			return err
		}
		url, stopServer, err := serve(ctx, dbURL, pool)
		if err != nil {
			return err
		}
		defer stopServer()
		cfg.url, cfg.pgDir = url, cluster.DataDir()
		if cfg.keys, cfg.typ, err = seed(ctx, dbURL, url, tenants, tier); err != nil {
			return err
		}
		fmt.Printf("local apiserver %s, PostgreSQL fsync=%v, %d tenants, tier %s, pool %d\n", url, durable, tenants, tier, pool)
	} else {
		cfg.keys = strings.Split(keys, ",")
		if cfg.url == "" || keys == "" || cfg.typ == "" {
			return fmt.Errorf("-url, -keys and -type are required without -local")
		}
	}
	return load(ctx, cfg)
}

func migrate(ctx context.Context, url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	return migrations.Up(ctx, db)
}

func serve(ctx context.Context, dbURL string, pool int32) (string, func(), error) {
	st, err := store.Open(ctx, dbURL, pool)
	if err != nil {
		return "", nil, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(sctx, app.Config{Listener: ln, Store: st, TokenKey: key, Logger: slog.Default()})
	}()
	return "http://" + ln.Addr().String(), func() { cancel(); <-done; st.Close() }, nil
}

// seed makes tenants with unbounded quotas, a catalog, and enough hosts and GPUs that capacity
// never runs out during the run (gpuServers of 64 GPUs: 51,200 shared slices, 15 s at 3,000/s;
// 20,480 ran out in a 15 s run at 1,365/s).
const gpuServers = 100

func seed(ctx context.Context, dbURL, url string, tenants int, tier string) ([]string, string, error) {
	st, err := store.Open(ctx, dbURL, 4)
	if err != nil {
		return nil, "", err
	}
	defer st.Close()
	_, op, err := app.Bootstrap(ctx, st, "bench@localhost", authn.RoleOperator)
	if err != nil {
		return nil, "", err
	}
	var keys []string
	for i := 0; i < tenants; i++ {
		_, _, k, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: fmt.Sprintf("bench-%d", i), QuotaInstances: 1 << 30,
			QuotaGPUs: 1 << 30, QuotaGPUMemoryBytes: 1 << 62}, fmt.Sprintf("bench-%d@localhost", i))
		if err != nil {
			return nil, "", err
		}
		keys = append(keys, k)
	}
	c := client{url: url, http: http.DefaultClient}
	var m store.GPUModel
	if err := c.do(ctx, op, "POST", "/v1/gpu-models", map[string]any{"name": "H100", "memory_bytes": 80 << 30, "nvml_match": "H100"}, &m); err != nil {
		return nil, "", err
	}
	it := map[string]any{"name": "bench", "vcpus": 1, "memory_mib": 1024, "disk_gib": 10, "price_per_hour": 10, "tier": "dedicated"}
	if tier != "none" {
		it["tier"], it["gpu_count"], it["gpu_model_id"] = tier, 1, m.ID
	}
	var typ store.InstanceType
	if err := c.do(ctx, op, "POST", "/v1/instance-types", it, &typ); err != nil {
		return nil, "", err
	}
	if err := c.do(ctx, op, "POST", "/v1/images", map[string]any{"name": "ubuntu-24.04", "source": "https://images.example/ubuntu-24.04.qcow2",
		"sha256": strings.Repeat("ab", 32), "min_disk_gib": 1}, nil); err != nil {
		return nil, "", err
	}
	for i := 0; i < 8; i++ {
		var d server.NewDaemon
		if err := c.do(ctx, op, "POST", "/v1/hosts", map[string]string{"name": fmt.Sprintf("host-%d", i)}, &d); err != nil {
			return nil, "", err
		}
		if err := c.do(ctx, d.Credential, "POST", "/v1/agent/host/heartbeat", api.HostReport{Hostname: fmt.Sprintf("host-%d", i),
			Capacity: api.HostCapacity{VCPUs: 1 << 20, MemoryMiB: 1 << 30, DiskGiB: 1 << 30}}, nil); err != nil {
			return nil, "", err
		}
	}
	for i := 0; i < gpuServers && tier != "none"; i++ {
		var d server.NewDaemon
		if err := c.do(ctx, op, "POST", "/v1/gpu-servers", map[string]string{"name": fmt.Sprintf("gpu-%d", i)}, &d); err != nil {
			return nil, "", err
		}
		rep := api.GPUServerReport{Hostname: fmt.Sprintf("gpu-%d", i), Endpoint: fmt.Sprintf("gpu-%d:7000", i), Backend: "simulated"}
		for g := 0; g < 64; g++ {
			rep.GPUs = append(rep.GPUs, api.GPUInfo{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", i, g), Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true})
		}
		if err := c.do(ctx, d.Credential, "POST", "/v1/agent/gpu-server/heartbeat", rep, nil); err != nil {
			return nil, "", err
		}
	}
	// A fleet in service has planner statistics (autovacuum analyzes a table within about a
	// minute of it changing); a just-seeded one has none, and the placement query then sorts
	// every GPU (1.2 ms) instead of stopping at the first that fits in the index (0.1 ms).
	if _, err := st.Pool.Exec(ctx, "ANALYZE"); err != nil {
		return nil, "", fmt.Errorf("analyze: %w", err)
	}
	return keys, typ.ID.String(), nil
}

type client struct {
	url  string
	http *http.Client
}

func (c client) do(ctx context.Context, key, method, path string, body, out any, hdr ...string) error {
	status, raw, err := c.raw(ctx, key, method, path, body, hdr...)
	if err != nil {
		return err
	}
	if status >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, status, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (c client) raw(ctx context.Context, key, method, path string, body any, hdr ...string) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// load runs cfg.clients closed-loop clients for cfg.duration and prints the figures.
func load(ctx context.Context, cfg config) error {
	tr := &http.Transport{MaxIdleConns: cfg.clients * 2, MaxIdleConnsPerHost: cfg.clients * 2}
	c := client{url: cfg.url, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		statuses  = map[int]int{}
		seq       atomic.Int64
		wg        sync.WaitGroup
	)
	selfCPU0, pgCPU0 := cputime.Self(), cputime.PostgresServer(cfg.pgDir)
	start := time.Now()
	for w := 0; w < cfg.clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			key := cfg.keys[w%len(cfg.keys)]
			var mine []time.Duration
			mineStatus := map[int]int{}
			for ctx.Err() == nil {
				n := seq.Add(1)
				body := map[string]string{"name": fmt.Sprintf("load-%d", n), "instance_type_id": cfg.typ, "image": "ubuntu-24.04"}
				var hdr []string
				if cfg.idempotency {
					hdr = []string{"Idempotency-Key", fmt.Sprintf("load-%d-%d", start.UnixNano(), n)}
				}
				t0 := time.Now()
				status, _, err := c.raw(ctx, key, "POST", "/v1/instances", body, hdr...)
				if err != nil {
					if ctx.Err() == nil {
						mineStatus[-1]++
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				mineStatus[status]++
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			for k, v := range mineStatus {
				statuses[k] += v
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	selfCPU1, pgCPU1 := cputime.Self(), cputime.PostgresServer(cfg.pgDir)
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(float64(len(latencies)-1)*p)]
	}
	fmt.Printf("clients %d, duration %s, requests %d, statuses %v\n", cfg.clients, elapsed.Round(time.Millisecond), len(latencies), statuses)
	fmt.Printf("creates/s %.0f   p50 %s   p90 %s   p99 %s   max %s\n", float64(statuses[201])/elapsed.Seconds(),
		pct(0.50).Round(10*time.Microsecond), pct(0.90).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond),
		pct(1).Round(10*time.Microsecond))
	if n := statuses[201]; n > 0 && cfg.pgDir != "" {
		self, pg := selfCPU1-selfCPU0, pgCPU1-pgCPU0
		perCreate := (self + pg) / time.Duration(n)
		fmt.Printf("CPU: apiserver+clients %s, PostgreSQL %s: %s per create (%.0f creates/s per fully free core)\n",
			self.Round(time.Millisecond), pg.Round(time.Millisecond), perCreate.Round(time.Microsecond),
			float64(time.Second)/float64(perCreate))
	}
	if statuses[201] == 0 {
		return fmt.Errorf("no instance was created")
	}
	return nil
}

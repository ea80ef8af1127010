// Package chaos is issue 9's chaos test: the apiserver, hostd and gpuserverd run as real
// processes and are SIGKILLed and restarted at random moments while tenants create and delete
// VMs; at the end nothing may be leaked, lost or counted twice.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/store"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
	"gpucloud/sdk"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestChaos drives GPUCLOUD_CHAOS_CYCLES (default 200) create/delete cycles of shared-tier GPU
// VMs through the SDK, 4 at a time, while a seeded RNG (GPUCLOUD_CHAOS_SEED, else the clock;
// printed) SIGKILLs and restarts `apiserver serve`, hostd and gpuserverd. Every fifth cycle runs
// the guest program through the guest library against gpuserverd, using GPU memory. Two
// "keeper" VMs live through the whole test; a second gpuserverd runs beside the first, and a
// mover (move_test.go) drains, with move, the GPU server the first keeper is on, again and again,
// while a guest program runs on the keeper: it must run on to a correct end on the other server.
//
// hostd runs on libvirt's test:///default driver, whose domains live in hostd's process: a
// killed hostd loses them all. The test treats that, honestly, as the host rebooting with the
// VMs on it, and asserts that the restarted hostd re-creates what the apiserver wants (the keepers
// are running again at the end) and removes what it does not. The host has no InfiniBand
// adapter (an empty sysfs root), so its VF pool is empty; the claim check is that no claim file
// exists. gpuserverd runs its simulated backend (a named test double), two devices.
//
// After the last cycle the daemons are left alone until the platform converges, then: every
// name was created once (idempotent retries); no VM is known to hostd (its hostd_domain metric)
// that the API does not list as live, and every live instance's API state is the state of its
// domain; no seed directory, VF claim, GPU reservation or host room is held for a dead instance;
// neither gpuserverd serves a session or runs a worker process (a killed gpuserverd's workers are
// adopted by the next one, issue 18, and end with their sessions); billing holds every record in
// each gpuserverd's usage log exactly once and no other from it, and no instance is billed twice for the
// same time (GPU sessions or VM windows); every instance's billed held time (GPU, VM, root disk)
// equals its recorded running time to the second.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: not in -short")
	}
	cycles := envInt(t, "GPUCLOUD_CHAOS_CYCLES", 200)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GPUCLOUD_CHAOS_SEED"); s != "" {
		seed = uint64(envInt(t, "GPUCLOUD_CHAOS_SEED", 0))
	}
	t.Logf("chaos: seed %d (GPUCLOUD_CHAOS_SEED=%d replays the kill schedule), %d cycles", seed, seed, cycles)
	t0 := time.Now()
	p := startPlatform(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	var keepers []string
	for _, name := range []string{"keeper-1", "keeper-2"} {
		id, err := p.create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		keepers = append(keepers, id)
	}
	for _, id := range keepers {
		if st := p.wait(ctx, t, id, sdk.StateRunning); st != sdk.StateRunning {
			t.Fatalf("keeper %s is %s", id, st)
		}
	}

	stopChaos := make(chan struct{})
	chaosDone := make(chan struct{})
	go func() { defer close(chaosDone); p.chaos(t, seed, stopChaos) }()
	var moves moveStats
	moverDone := make(chan struct{})
	go func() { defer close(moverDone); moves = p.mover(ctx, t, keepers[0], stopChaos) }()

	var next, guests, guestErrs, survived atomic.Int64
	var sessMu sync.Mutex
	var whole, cutIDs []string // instances whose guest session ran to its end / was cut by a kill
	tCycles := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int(next.Add(1)); n <= cycles && !t.Failed(); n = int(next.Add(1)) {
				id, err := p.create(ctx, fmt.Sprintf("c%03d", n))
				if err != nil {
					t.Errorf("cycle %d: %v", n, err) // t.Fatal belongs to the test's goroutine
					return
				}
				// A daemon's restart may delay a VM, never fail it: hostd converges from anywhere.
				st := p.wait(ctx, t, id, sdk.StateRunning, sdk.StateFailed)
				if st != sdk.StateRunning {
					inst, _ := p.tenant.GetInstance(ctx, id)
					t.Errorf("cycle %d: %s is %s (%s), want running", n, id, st, inst.FailureReason)
				} else if n%5 == 0 {
					guests.Add(1)
					// A just-restarted gpuserverd may not listen yet; a guest session starts once
					// it does, and fails only if gpuserverd is killed while it runs.
					p.gsServing()
					before := p.gs.epoch.Load()
					err = p.guest(id)
					cut := before%2 == 0 || p.gs.epoch.Load() != before
					switch {
					case err != nil && cut:
						guestErrs.Add(1)
						t.Logf("cycle %d: guest session cut by a gpuserverd kill: %v", n, err)
					case err != nil:
						t.Errorf("cycle %d: guest session failed while gpuserverd ran: %v", n, err)
					case p.gs.epoch.Load() != before:
						survived.Add(1) // its worker outlived the kill and was adopted
					}
					sessMu.Lock()
					if err == nil {
						whole = append(whole, id)
					} else {
						cutIDs = append(cutIDs, id)
					}
					sessMu.Unlock()
				}
				p.delete(ctx, t, id)
				if st := p.wait(ctx, t, id, sdk.StateDeleted); st != sdk.StateDeleted {
					t.Errorf("cycle %d: %s is %s after delete", n, id, st)
				}
			}
		}()
	}
	wg.Wait()
	close(stopChaos)
	<-chaosDone
	<-moverDone
	t.Logf("drains that move work: %d drains of the keeper's GPU server, %d moved it, %d moves failed; its program ran on to a correct end %d times, cut by a gpuserverd kill %d times",
		moves.drains, moves.moved, moves.failedMoves, moves.steadyOK, moves.steadyCut)
	if moves.moved == 0 || moves.steadyOK == 0 {
		t.Errorf("no drain moved the keeper with its program running to a correct end (%+v)", moves)
	}
	cyclesTook := time.Since(tCycles)
	if t.Failed() {
		p.dumpLogs(t)
		return
	}
	problems := p.converge(ctx, t, keepers)
	if len(problems) > 0 {
		p.dumpLogs(t)
		t.Fatalf("after convergence:\n  %s", strings.Join(problems, "\n  "))
	}
	if lost := p.gpuTimeLost(ctx, t, whole); len(lost) > 0 {
		p.dumpLogs(t)
		t.Fatalf("guest sessions billed less than their %v hold minus one checkpoint period: %v", guestHold, lost)
	}
	t.Logf("guest sessions cut by a gpuserverd kill: %d, of which %d billed some GPU time (checkpoints); sessions that ran across a kill and finished: %d",
		len(cutIDs), p.billedSome(ctx, t, cutIDs), survived.Load())
	t.Logf("keepers' minutes without a VM usage record (hostd down, or a window in progress at the end): %v", p.missingVMWindows(ctx, t, keepers))
	t.Logf("chaos: seed %d, %d cycles (%d guest sessions, %d cut by a kill); kills: apiserver %d, hostd %d, gpuserverd %d (and %d graceful restarts); cycles %.1f s, total %.1f s",
		seed, cycles, guests.Load(), guestErrs.Load(), p.api.kills, p.hostd.kills, p.gs.kills, p.gs.stops,
		cyclesTook.Seconds(), time.Since(t0).Seconds())
	if os.Getenv("GPUCLOUD_CHAOS_KEEP_LOGS") != "" {
		p.dumpLogs(t) // a passing run's logs too, to study what it tolerated (failed moves)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// platform is the three daemons, the database behind the apiserver and the clients.
type platform struct {
	bin, dbURL, hostData, gsData, hostdMetrics, gsAdmin, gsEP string
	api, hostd, gs                                            *daemon
	st                                                        *store.Store
	op, tenant                                                *sdk.Client
	typ, gsID, hostID                                         string
	// The second GPU server, which drains move work to and from (never killed by the chaos).
	gs2                             *daemon
	gs2Data, gs2Admin, gs2EP, gs2ID string
}

func startPlatform(t *testing.T) *platform {
	t.Helper()
	ctx := context.Background()
	p := &platform{bin: build(t), dbURL: pgtest.NewDatabase(t)}
	var err error
	if p.st, err = store.Open(ctx, p.dbURL, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.st.Close)
	_, opKey, err := app.Bootstrap(ctx, p.st, "op@chaos.example", authn.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	_, _, tenantKey, err := app.TenantWithAdmin(ctx, p.st, store.Tenant{Name: "chaos", QuotaInstances: 1000, QuotaGPUs: 1000,
		QuotaGPUMemoryBytes: 1 << 50}, "admin@chaos.example")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addrs := freeAddrs(t, 6)
	apiAddr, gsEP := addrs[0], addrs[1]
	p.gsEP = gsEP
	p.gsAdmin, p.hostdMetrics = addrs[2], addrs[3]
	p.gs2EP, p.gs2Admin = addrs[4], addrs[5]
	url := "http://" + apiAddr
	p.api = newDaemon(t, "apiserver", nil, filepath.Join(p.bin, "apiserver"), "serve", "--database-url", p.dbURL,
		"--listen", apiAddr, "--token-key", filepath.Join(dir, "token.key"), "--generate-token-key", "--max-db-conns", "8")
	// Retries long enough to outlast an apiserver restart; the Idempotency-Key stays the same
	// across them, so a create retried after a kill is still one create.
	retry := sdk.Options{Retry: sdk.RetryPolicy{MaxAttempts: 80, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}}
	if p.op, err = sdk.New(url, opKey, retry); err != nil {
		t.Fatal(err)
	}
	if p.tenant, err = sdk.New(url, tenantKey, retry); err != nil {
		t.Fatal(err)
	}
	// Eight 2 GiB slices per 16 GiB simulated GPU: room for every VM the test runs at once.
	if _, err := p.op.SetSharedTier(ctx, 2<<30); err != nil {
		t.Fatal(err)
	}
	model, err := p.op.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: "Simulated GPU", MemoryBytes: sim.DefaultMemory, NVMLMatch: "Simulated GPU"})
	if err != nil {
		t.Fatal(err)
	}
	it, err := p.op.CreateInstanceType(ctx, sdk.CreateInstanceTypeRequest{Name: "chaos-shared", VCPUs: 1, MemoryMiB: 256,
		DiskGiB: 1, GPUModelID: model.ID, GPUCount: 1, Tier: "shared", PricePerHour: 100})
	if err != nil {
		t.Fatal(err)
	}
	p.typ = it.ID
	gsReg, err := p.op.CreateGPUServer(ctx, "gs-chaos")
	if err != nil {
		t.Fatal(err)
	}
	hostReg, err := p.op.CreateHost(ctx, "host-chaos")
	if err != nil {
		t.Fatal(err)
	}
	p.gsID, p.hostID = gsReg.ID, hostReg.ID
	gs2Reg, err := p.op.CreateGPUServer(ctx, "gs-chaos-2")
	if err != nil {
		t.Fatal(err)
	}
	p.gs2ID = gs2Reg.ID

	p.gsData = filepath.Join(dir, "gpuserverd")
	p.gs = newDaemon(t, "gpuserverd", []string{"GPUSERVERD_SIM_DEVICES=2"}, filepath.Join(p.bin, "gpuserverd"),
		"--apiserver", url, "--credential", gsReg.Credential, "--listen", gsEP, "--advertise", gsEP, "--admin", p.gsAdmin,
		"--backend", "simulated", "--data-dir", p.gsData, "--usage-period", "200ms", "--max-heartbeat-period", "500ms",
		"--checkpoint-period", checkpointPeriod.String(), "--keep-sessions-on-stop")
	p.gs2Data = filepath.Join(dir, "gpuserverd-2")
	p.gs2 = newDaemon(t, "gpuserverd-2", []string{"GPUSERVERD_SIM_DEVICES=2", "GPUSERVERD_SIM_UUID_OFFSET=16"}, filepath.Join(p.bin, "gpuserverd"),
		"--apiserver", url, "--credential", gs2Reg.Credential, "--listen", p.gs2EP, "--advertise", p.gs2EP, "--admin", p.gs2Admin,
		"--backend", "simulated", "--data-dir", p.gs2Data, "--usage-period", "200ms", "--max-heartbeat-period", "500ms",
		"--checkpoint-period", checkpointPeriod.String(), "--keep-sessions-on-stop")

	p.hostData = filepath.Join(dir, "hostd")
	images := filepath.Join(p.hostData, "images")
	if err := os.MkdirAll(filepath.Join(dir, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(images, "base.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("base image: %v %s", err, out)
	}
	if _, err := app.EnsureImage(ctx, p.st, "base", filepath.Join(images, "base.qcow2"), 1, false); err != nil {
		t.Fatal(err)
	}
	p.hostd = newDaemon(t, "hostd", nil, filepath.Join(p.bin, "hostd"), "-apiserver", url, "-credential", hostReg.Credential,
		"-libvirt-uri", "test:///default", "-data-dir", p.hostData, "-sysfs-root", filepath.Join(dir, "sys"),
		"-enable-vfs=false", "-guest-library", filepath.Join(p.bin, "libcuda.so.1"), "-network", "user",
		"-listen", p.hostdMetrics, "-interval", "1s")
	return p
}

// chaos kills a random daemon every 0.3-2 s until stop closes; the dead one is restarted after
// 0-300 ms (a crash and a supervisor's restart). gpuserverd is stopped gracefully instead half the
// time (SIGTERM with --keep-sessions-on-stop, as the systemd unit restarts it): its sessions'
// workers must be adopted by the next one as after a kill (issue 18).
func (p *platform) chaos(t *testing.T, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ds := []*daemon{p.api, p.hostd, p.gs}
	for {
		select {
		case <-stop:
			return
		case <-time.After(300*time.Millisecond + time.Duration(rng.Int64N(int64(1700*time.Millisecond)))):
		}
		d := ds[rng.IntN(len(ds))]
		if d == p.gs && rng.IntN(2) == 0 {
			d.stop() // an upgrade's restart: the sessions' workers are left for the next one
			d.stops++
		} else {
			d.kill()
			d.kills++
		}
		time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		if err := d.start(); err != nil {
			t.Errorf("restart after kill: %v", err)
			return
		}
	}
}

// create makes a VM; the SDK retries it (one Idempotency-Key) until the apiserver answers.
func (p *platform) create(ctx context.Context, name string) (string, error) {
	inst, err := p.tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: p.typ, Image: "base"})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	return inst.ID, nil
}

func (p *platform) delete(ctx context.Context, t *testing.T, id string) {
	for range 20 {
		_, err := p.tenant.DeleteInstance(ctx, id)
		if err == nil {
			return
		}
		// A retried delete whose first attempt landed before a kill finds it under way.
		if inst, gerr := p.tenant.GetInstance(ctx, id); gerr == nil && (inst.State == sdk.StateDeleting || inst.State == sdk.StateDeleted) {
			return
		}
		t.Logf("delete %s: %v (retrying)", id, err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("delete %s never accepted", id)
}

// wait polls the instance until it is in one of states (or 90 s pass) and returns its state.
func (p *platform) wait(ctx context.Context, t *testing.T, id string, states ...string) string {
	var last string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		inst, err := p.tenant.GetInstance(ctx, id)
		if err != nil {
			t.Logf("get %s: %v", id, err)
			continue
		}
		last = inst.State
		for _, s := range states {
			if last == s {
				return last
			}
		}
	}
	return last
}

// gsServing waits (up to 10 s) until gpuserverd accepts guest connections.
func (p *platform) gsServing() { serving(p.gsEP) }

// serving waits (up to 10 s) until endpoint accepts connections.
func serving(endpoint string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", endpoint, time.Second); err == nil {
			c.Close()
			return
		}
	}
}

// guest runs the guest program with the seed's guest.conf, as the VM would. hostd wrote the
// seed to its data dir; a kill may cut the session, which the caller counts.
func (p *platform) guest(id string) error {
	iso := filepath.Join(p.hostData, "instances", id, "seed.iso")
	conf, err := exec.Command("isoinfo", "-R", "-i", iso, "-x", "/gpucloud/guest.conf").Output()
	if err != nil {
		return fmt.Errorf("seed of %s: %w", id, err)
	}
	f := filepath.Join(os.TempDir(), "chaos-"+id+".conf")
	if err := os.WriteFile(f, conf, 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "golden"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + p.bin, "GPUCLOUD_CONFIG=" + f}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GOLDEN OK") {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// dumpLogs prints the end of every daemon's log and keeps the whole logs where they outlive
// the test's temp dir.
func (p *platform) dumpLogs(t *testing.T) {
	keep, err := os.MkdirTemp("", "gpucloud-chaos-logs-")
	for _, d := range []*daemon{p.api, p.hostd, p.gs, p.gs2} {
		t.Log(d.tail())
		if err == nil {
			if b, rerr := os.ReadFile(d.log); rerr == nil {
				os.WriteFile(filepath.Join(keep, d.name+".log"), b, 0o600)
			}
		}
	}
	if err == nil {
		t.Logf("full daemon logs kept in %s", keep)
	}
}

// usageLog reads a gpuserverd's durable usage log in its data dir (its file format: one JSON
// record a line).
func (p *platform) usageLog(t *testing.T, data string) []string {
	raw, err := os.ReadFile(filepath.Join(data, "usage.jsonl"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range strings.Split(string(raw), "\n") {
		var rec struct{ ID string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.ID != "" {
			ids = append(ids, rec.ID)
		}
	}
	return ids
}

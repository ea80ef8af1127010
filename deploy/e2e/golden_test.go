package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestGoldenPath is issue 9's golden path on the local stack's parts: a tenant creates a
// shared-tier GPU VM through the API, hostd starts it, a process standing in for the guest runs a
// C program through the guest library with exactly the seed's guest.conf against gpuserverd,
// usage flows into billing and shows in the finance report, and deleting the VM releases every
// reservation. Each step's time is printed (go test -v).
func TestGoldenPath(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	at := t0
	bin := buildGolden(t)
	step(t, &at, "build guest library, gpuserverd, C program")

	env := sdktest.New(t)
	gsReg, err := env.OperatorClient.CreateGPUServer(ctx, "gs-e2e")
	if err != nil {
		t.Fatal(err)
	}
	step(t, &at, "apiserver + billing on PostgreSQL")

	backend := os.Getenv("GPUCLOUD_E2E_BACKEND") // "cuda" on a GPU machine
	if backend == "" {
		backend = sim.Kind
	}
	gsData, gsEndpoint := t.TempDir(), freeAddr(t)
	gs := startGPUServerd(t, bin, env.URL, gsReg.Credential, gsData, gsEndpoint, backend)
	srv, err := env.OperatorClient.GetGPUServer(ctx, gsReg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Backend != backend || len(srv.GPUs) == 0 || (backend == sim.Kind && srv.GPUs[0].UUID != sim.UUID(0)) {
		t.Fatalf("GPU server after join: %+v", srv)
	}
	gpu := srv.GPUs[0]
	t.Logf("gpuserverd reports %d GPU(s), the first %s %q", len(srv.GPUs), gpu.UUID, gpu.Name)
	step(t, &at, "gpuserverd joined with its credential")

	// The catalog matches what the GPU server reports (the simulated GPU, or the real GPU's NVML
	// name, which the seeded "H100" model may already match).
	modelID := gpu.GPUModelID
	if modelID == "" {
		m, err := env.OperatorClient.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: gpu.Name, MemoryBytes: gpu.MemoryBytes, NVMLMatch: gpu.Name})
		if err != nil {
			t.Fatal(err)
		}
		modelID = m.ID
	}
	typ := sharedType(t, env, "e2e-shared", modelID)
	h := startHost(t, env, filepath.Join(bin, "libcuda.so.1"), 8)
	step(t, &at, "hostd registered with its credential")

	tenant := env.Client(t, env.A.AdminKey)
	inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "golden", InstanceTypeID: typ, Image: "base"})
	if err != nil {
		t.Fatal(err)
	}
	step(t, &at, "tenant created a shared GPU VM")
	h.converge(tenant, inst.ID, sdk.StateRunning)
	step(t, &at, "hostd started it (running)")
	desired, err := h.cp.DesiredInstances(ctx)
	want := desired.Instances
	if err != nil || len(want) != 1 || want[0].GPU == nil || len(want[0].GPU.GPUUUIDs) != 1 || !reportedUUID(srv, want[0].GPU.GPUUUIDs[0]) ||
		strings.Join(want[0].GPU.Endpoints, ",") != gs.endpoint {
		t.Fatalf("the apiserver reserved %+v; gpuserverd reports %+v at %s (%v)", want, srv.GPUs, gs.endpoint, err)
	}

	conf := filepath.Join(t.TempDir(), "guest.conf")
	if err := os.WriteFile(conf, []byte(seedFile(t, h, inst.ID, "/gpucloud/guest.conf")), 0o600); err != nil {
		t.Fatal(err)
	}
	runGuest(t, bin, conf)
	step(t, &at, "guest program ran through the guest library")

	fin := env.Client(t, env.Finance)
	gpuMs := waitGPUMs(t, fin, env.A.ID, 1)
	if gpuMs < 300 {
		t.Fatalf("finance report shows %d GPU-ms for a session held at least 300 ms", gpuMs)
	}
	t.Logf("finance report: tenant %s used %d GPU-ms", env.A.ID, gpuMs)
	step(t, &at, "usage reached billing; finance report shows it")

	// A restarted gpuserverd resumes after the last acknowledged record: a second session's
	// record arrives, the first is not counted again.
	gs.stop(t)
	gs = startGPUServerd(t, bin, env.URL, gsReg.Credential, gsData, gsEndpoint, backend)
	runGuest(t, bin, conf)
	waitGPUMs(t, fin, env.A.ID, 2)
	if n := records(t, env, gsReg.ID); n != 2 {
		t.Fatalf("billing holds %d GPU records from gpuserverd after a restart and a second session, want 2", n)
	}
	step(t, &at, "gpuserverd restarted; second session billed once")

	// A session still open when its VM is deleted is ended by gpuserverd, told by the apiserver.
	hold := holdSession(t, bin, conf)
	if n := gs.activeSessions(t); n != 1 {
		t.Fatalf("gpuserverd serves %d sessions while the guest holds one", n)
	}
	if _, err := tenant.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(tenant, inst.ID, sdk.StateDeleted)
	step(t, &at, "VM deleted while a session was open")
	for deadline := time.Now().Add(20 * time.Second); gs.activeSessions(t) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the deleted VM's session still runs after 20 s")
		}
	}
	if got := hold.finish(t); !strings.HasPrefix(got, "LOST") {
		t.Fatalf("the guest's memory after its VM was deleted: %q, want LOST", got)
	}
	step(t, &at, "gpuserverd ended the deleted VM's session")
	if n := reserved(t, env, gsReg.ID); n != 0 {
		t.Fatalf("GPU reservation left after delete: %d bytes", n)
	}
	if n := usedVCPUs(t, env, h.id); n != 0 {
		t.Fatalf("host room left after delete: %d vCPUs", n)
	}
	if active := gs.activeSessions(t); active != 0 {
		t.Fatalf("gpuserverd still serves %d sessions", active)
	}
	waitGPUMs(t, fin, env.A.ID, 3) // the ended session is billed too
	step(t, &at, "reservations released; ended session billed")
	t.Logf("golden path total %.1f s", time.Since(t0).Seconds())
}

func buildGolden(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, s := range [][]string{
		{"make", "-s", "-C", "../../gpuserverd/guest", "BUILD=" + dir},
		{"go", "build", "-o", filepath.Join(dir, "gpuserverd"), "../../cmd/gpuserverd"},
		{"gcc", "-Wall", "-Wextra", "-Werror", "-I../../gpuserverd/guest/include", "-o", filepath.Join(dir, "golden"),
			"testdata/golden.c", "-L" + dir, "-lcuda"},
		{"gcc", "-Wall", "-Wextra", "-Werror", "-I../../gpuserverd/guest/include", "-o", filepath.Join(dir, "probe"),
			"../../gpuserverd/guest/tests/probe.c", "-L" + dir, "-lcuda"},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	return dir
}

// runGuest runs the C program as the guest would: its only configuration is the seed's file.
func runGuest(t *testing.T, bin, conf string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "golden"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + bin, "GPUCLOUD_CONFIG=" + conf, "GPUCLOUD_DEBUG=1"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GOLDEN OK") {
		t.Fatalf("guest program: %v\n%s", err, out)
	}
}

func reportedUUID(srv sdk.GPUServer, uuid string) bool {
	for _, g := range srv.GPUs {
		if g.UUID == uuid {
			return true
		}
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// held is a guest program holding a session open (the guest tests' probe, "hold" mode).
type held struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func holdSession(t *testing.T, bin, conf string) *held {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "probe"), "hold", "1")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + bin, "GPUCLOUD_CONFIG=" + conf}
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h := &held{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := h.out.ReadString('\n')
	if !strings.HasPrefix(line, "HELD") {
		t.Fatalf("probe hold: %q %v", line, err)
	}
	return h
}

// finish lets the program check its memory and returns what it found (INTACT or LOST ...).
func (h *held) finish(t *testing.T) string {
	t.Helper()
	io.WriteString(h.stdin, "go\n")
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return strings.TrimSpace(line)
}

type gpuserverd struct {
	cmd      *exec.Cmd
	endpoint string
	admin    string
	data     string
	done     chan error
}

// startGPUServerd starts the gpuserverd binary with only its credential: it learns its id and
// the token key from the apiserver, as deployed. flags come last (a repeated flag's last value wins).
func startGPUServerd(t *testing.T, bin, apiURL, cred, data, ep, backend string, flags ...string) *gpuserverd {
	t.Helper()
	args := append([]string{"--apiserver", apiURL, "--credential", cred,
		"--listen", ep, "--advertise", ep, "--admin", "127.0.0.1:0", "--backend", backend,
		"--data-dir", data, "--usage-period", "100ms", "--max-heartbeat-period", "200ms"}, flags...)
	cmd := exec.Command(filepath.Join(bin, "gpuserverd"), args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err = cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gpuserverd{cmd: cmd, endpoint: ep, data: data, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { g.done <- cmd.Wait() }()
	t.Cleanup(func() { g.stop(t) })
	select {
	case l := <-lines:
		if _, err := fmt.Sscanf(l, "listening %s admin %s", new(string), &g.admin); err != nil {
			t.Fatalf("gpuserverd said %q", l)
		}
	case err := <-g.done:
		t.Fatalf("gpuserverd exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gpuserverd did not start in 30 s")
	}
	return g
}

func (g *gpuserverd) stop(t *testing.T) {
	if g.cmd.ProcessState != nil {
		return
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
		t.Error("gpuserverd ignored SIGTERM for 10 s")
	}
}

// activeSessions reads gpuserverd's session gauge from its /metrics.
func (g *gpuserverd) activeSessions(t *testing.T) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.admin+"/metrics", nil)
	tok, _ := os.ReadFile(filepath.Join(g.data, "admin-token")) // generated by gpuserverd
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("gpuserverd /metrics: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(out), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "gpuserverd_sessions_active %d", &n); err == nil {
			return n
		}
	}
	t.Fatalf("no gpuserverd_sessions_active in /metrics:\n%s", out)
	return -1
}

// waitGPUMs polls the finance report until tenant's row counts n records, and returns its GPU-ms.
func waitGPUMs(t *testing.T, fin *sdk.Client, tenant string, n int64) int64 {
	t.Helper()
	day := time.Now().UTC().Truncate(24 * time.Hour)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, err := fin.GPUHours(context.Background(), sdk.GPUHoursQuery{From: day.Add(-24 * time.Hour), To: day.Add(48 * time.Hour),
			GroupBy: "tenant", Granularity: "month"})
		if err != nil {
			t.Fatal(err)
		}
		var ms, recs int64
		for _, r := range rep.Rows {
			if r.Group != tenant {
				t.Fatalf("report has a row for %q, which used no GPU: %+v", r.Group, rep.Rows)
			}
			ms, recs = ms+r.GPUMs, recs+r.Records
		}
		if recs >= n {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("finance report after 20 s: %+v", rep)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func records(t *testing.T, env *sdktest.Env, source string) int {
	t.Helper()
	var n int
	if err := env.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM billing_usage_records WHERE kind = 'gpu' AND source = $1`,
		source).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

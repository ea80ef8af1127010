package web_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/hostd/console"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
	"gpucloud/internal/sshtest"
	"gpucloud/sdk/sdktest"
	"gpucloud/web"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// stack is the real apiserver (console included) on a fresh PostgreSQL database.
type stack struct {
	t   *testing.T
	url string
	st  *store.Store
}

func (s *stack) call(method, path, key string, body, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

func (s *stack) must(want int, method, path, key string, body, out any) {
	s.t.Helper()
	if got := s.call(method, path, key, body, out); got != want {
		s.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// seedUser gives the user with email a console password.
func (s *stack) seedPassword(ctx context.Context, u store.User, pw string) {
	s.t.Helper()
	if err := s.st.SetPassword(ctx, u, pw); err != nil {
		s.t.Fatal(err)
	}
}

// fakeHost plays hostd through the agent API: every instance placed on it reaches the state
// its tenant wants, after a short delay so the console shows the transitional states.
func fakeHost(ctx context.Context, s *stack, cred string) {
	seen := map[string]time.Time{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var want api.DesiredInstances
		if s.call("GET", "/v1/agent/host/instances", cred, nil, &want) != 200 {
			continue
		}
		for _, d := range want.Instances {
			key := d.ID + "/" + d.DesiredState
			if seen[key].IsZero() {
				seen[key] = time.Now()
			}
			if time.Since(seen[key]) < time.Second {
				continue
			}
			obs := api.InstanceObserved{State: d.DesiredState, RebootGeneration: d.RebootGeneration}
			if d.DesiredState == api.DesiredRunning { // as hostd: a forwarded SSH port and the console's tail
				obs.PublicHost, obs.Forwards = "vmhost.example", []api.PortForward{{GuestPort: 22, HostPort: 22001}}
				obs.ConsoleLogTail = "[    0.000000] Linux version 6.1\n" + d.Name + " login: "
			}
			s.call("PUT", "/v1/agent/host/instances/"+d.ID+"/status", cred, obs, nil)
		}
	}
}

// TestConsoleEndToEnd drives the console in headless Chromium (web/e2e/console.mjs) against a
// real apiserver and database, with a fake host agent bringing instances up and down.
func TestConsoleEndToEnd(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (make deps installs it from scripts/deps.extra)")
	}
	out, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
	if major, _ := strconv.Atoi(string(bytes.TrimSpace(out))); err != nil || major < 20 {
		t.Skipf("node >= 20 is needed by playwright-core (found major version %q, %v)", bytes.TrimSpace(out), err)
	}
	chromium := os.Getenv("GPUCLOUD_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("chromium is not installed at %s (make deps installs Debian's chromium)", chromium)
	}
	// xterm.js is embedded when the binary is built, so it must be installed before: the
	// interactive console's steps need it.
	if _, err := fs.Stat(web.Assets(), "vendor/xterm/xterm.js"); err != nil {
		t.Fatal("xterm.js is not in the console's files: run scripts/web-vendor.sh (make test and make test-web do) before go test")
	}
	npmCI(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	baseURL, _, st := sdktest.StartServer(ctx, t)
	s := &stack{t: t, url: baseURL, st: st}

	boot := authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	opUser, opKey, err := app.Bootstrap(ctx, st, "operator@example.com", authn.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	finUser, finKey, err := app.Bootstrap(ctx, st, "finance@example.com", authn.RoleFinance)
	if err != nil {
		t.Fatal(err)
	}
	_, aUser, aKey, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: "tenant-a", QuotaInstances: 10, QuotaGPUs: 8, QuotaGPUMemoryBytes: 1 << 40}, "alice@a.example")
	if err != nil {
		t.Fatal(err)
	}
	_, bUser, _, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: "tenant-b", QuotaInstances: 10, QuotaGPUs: 8, QuotaGPUMemoryBytes: 1 << 40}, "bob@b.example")
	if err != nil {
		t.Fatal(err)
	}
	const pw = "console-e2e-password"
	for _, u := range []store.User{opUser, finUser, aUser, bUser} {
		s.seedPassword(boot, u, pw)
	}
	m := store.GPUModel{Name: "H100 80GB", MemoryBytes: 80 << 30, NVMLMatch: "H100"}
	if err := st.CreateGPUModel(boot, &m); err != nil {
		t.Fatal(err)
	}
	var cpuType string
	gpuTypes := map[string]string{} // tier -> instance type id
	for _, it := range []store.InstanceType{
		{Name: "h100-dedicated-1", VCPUs: 8, MemoryMiB: 65536, DiskGiB: 100, GPUModelID: &m.ID, GPUCount: 1, Tier: "dedicated", PricePerHour: 300, Currency: "USD"},
		{Name: "h100-shared-10g", VCPUs: 2, MemoryMiB: 8192, DiskGiB: 40, GPUModelID: &m.ID, GPUCount: 1, Tier: "shared", PricePerHour: 45, Currency: "USD"},
		{Name: "cpu-small", VCPUs: 1, MemoryMiB: 1024, DiskGiB: 10, Tier: "dedicated", PricePerHour: 2, Currency: "USD"},
	} {
		if err := st.CreateInstanceType(boot, &it); err != nil {
			t.Fatal(err)
		}
		if it.Name == "cpu-small" {
			cpuType = it.ID.String()
		} else {
			gpuTypes[it.Tier] = it.ID.String()
		}
	}
	for _, im := range []store.Image{
		{Name: "ubuntu-24.04", Source: "https://images.example/ubuntu-24.04.qcow2", SHA256: strings.Repeat("ab", 32), MinDiskGiB: 10, GuestLibraries: true},
		{Name: "demo", Source: "file:///var/lib/gpucloud/images/demo.qcow2", SHA256: strings.Repeat("cd", 32), MinDiskGiB: 1},
	} {
		if err := st.CreateImage(boot, &im); err != nil {
			t.Fatal(err)
		}
	}
	// silent-vm sits on host-2, which the sweeper's query then marks unreachable (the only daemon
	// heard from yet): the console must warn about it, and name no host to the tenant.
	var silentHost server.NewDaemon
	s.must(201, "POST", "/v1/hosts", opKey, map[string]string{"name": "host-2"}, &silentHost)
	s.must(200, "POST", "/v1/agent/host/heartbeat", silentHost.Credential, api.HostReport{Hostname: "host-2.local", Hypervisor: "test:///default",
		Capacity: api.HostCapacity{VCPUs: 4, MemoryMiB: 8192, DiskGiB: 100}}, nil)
	s.must(201, "POST", "/v1/instances", aKey, map[string]string{"name": "silent-vm", "instance_type_id": cpuType, "image": "ubuntu-24.04"}, nil)
	if n, err := st.MarkUnreachable(ctx, 0); err != nil || n != 1 {
		t.Fatalf("mark host-2 unreachable: %d %v", n, err)
	}
	var host, gsrv server.NewDaemon
	s.must(201, "POST", "/v1/hosts", opKey, map[string]string{"name": "host-1"}, &host)
	consoleURL := echoConsoles(t)
	var ack api.HostAck
	s.must(200, "POST", "/v1/agent/host/heartbeat", host.Credential, api.HostReport{Hostname: "host-1.local", Hypervisor: "test:///default",
		Capacity: api.HostCapacity{VCPUs: 64, MemoryMiB: 512 << 10, DiskGiB: 4000}, ConsoleURL: consoleURL.url}, &ack)
	consoleURL.registered(ack)
	s.must(201, "POST", "/v1/gpu-servers", opKey, map[string]string{"name": "gpu-1"}, &gsrv)
	rep := api.GPUServerReport{Hostname: "gpu-1.local", Endpoint: "gpu-1.local:7000", Backend: "simulated"}
	for i := 0; i < 4; i++ {
		rep.GPUs = append(rep.GPUs, api.GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-e2e-%d", i), Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true})
	}
	s.must(200, "POST", "/v1/agent/gpu-server/heartbeat", gsrv.Credential, rep, nil)
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go fakeHost(agentCtx, s, host.Credential)

	seedUsage(t, s, gsrv, aKey, aUser.TenantID.String(), gpuTypes)
	// $2 per dedicated H100 GPU-hour; shared stays unpriced.
	s.must(201, "POST", "/v1/prices", finKey, map[string]any{"kind": "gpu", "gpu_model": "H100 80GB", "tier": "dedicated",
		"unit_price_micros": 2_000_000, "currency": "USD", "effective_from": time.Now().UTC().Truncate(24 * time.Hour)}, nil)

	artifacts, _ := filepath.Abs(filepath.Join("e2e", "artifacts"))
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "console.mjs")
	cmd.Dir = "e2e"
	key := sshtest.New(t, "alice@laptop")
	cmd.Env = append(os.Environ(), "BASE_URL="+baseURL, "CHROMIUM="+chromium, "ARTIFACTS="+artifacts, "PASSWORD="+pw,
		"TENANT_A=alice@a.example", "TENANT_B=bob@b.example", "OPERATOR=operator@example.com", "FINANCE=finance@example.com",
		"SSH_PUBLIC_KEY="+key.Line, "SSH_FINGERPRINT="+key.Fingerprint)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	err = cmd.Run()
	t.Logf("browser run:\n%s", log.String())
	if err != nil {
		t.Fatalf("console end-to-end script failed: %v (screenshots in %s)", err, artifacts)
	}

	// What the browser did happened on the server: tenant A's VM went away, the host got cordoned.
	var list server.Page[store.Instance]
	s.must(200, "GET", "/v1/instances", aKey, nil, &list)
	for _, i := range list.Items {
		if i.Name == "e2e-vm" && i.State != "deleted" {
			t.Fatalf("e2e-vm is %s after the browser deleted it", i.State)
		}
	}
	var h store.Host
	s.must(200, "GET", "/v1/hosts/"+host.ID.String(), opKey, nil, &h)
	if !h.Cordoned {
		t.Fatal("the operator's cordon in the browser did not reach the server")
	}
	var ten store.Tenant
	s.must(200, "GET", "/v1/tenants/"+aUser.TenantID.String(), opKey, nil, &ten)
	if ten.QuotaInstances != 10 {
		t.Fatalf("a refused quota edit changed the quota to %d", ten.QuotaInstances)
	}
}

// npmCI installs the pinned Playwright client (no browser download: Debian's chromium is used).
func npmCI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("e2e", "node_modules", "playwright-core", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed (make deps installs it from scripts/deps.extra)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in web/e2e: %v\n%s", err, out)
	}
}

// seedUsage has the GPU server report GPU time of tenant A on two tiers today, so the finance
// report the browser downloads has rows to compare. Billing takes usage only for instances placed
// on the reporting server, so it creates one per tier (deleted again once billed).
func seedUsage(t *testing.T, s *stack, gsrv server.NewDaemon, key, tenant string, types map[string]string) {
	t.Helper()
	inst := map[string]store.Instance{}
	for tier, typ := range types {
		var i store.Instance
		s.must(201, "POST", "/v1/instances", key, map[string]string{"name": "usage-" + tier, "instance_type_id": typ, "image": "ubuntu-24.04"}, &i)
		inst[tier] = i
	}
	defer func() {
		for _, i := range inst {
			s.must(202, "DELETE", "/v1/instances/"+i.ID.String(), key, nil, nil)
		}
	}()
	day := time.Now().UTC().Truncate(24 * time.Hour)
	var batch api.UsageBatch
	for i, tier := range []string{"dedicated", "shared", "dedicated"} {
		start := day.Add(time.Duration(i) * time.Minute)
		r := api.UsageRecord{ID: fmt.Sprintf("%s/e2e/%d", gsrv.ID, i), Kind: api.UsageGPU, Source: gsrv.ID.String(), TenantID: tenant,
			InstanceID: inst[tier].ID.String(), SessionID: fmt.Sprintf("e2e-%d", i),
			Start: start, End: start.Add(time.Duration(30*(i+1)) * time.Second), GPUModel: "H100 80GB", Tier: tier, GPUCount: 1,
		}
		if tier == "shared" {
			r.MemoryQuota = 10 << 30 // the shared tier's slice
		}
		batch.Records = append(batch.Records, r)
	}
	var res api.UsageBatchResult
	s.must(200, "POST", "/v1/agent/usage", gsrv.Credential, batch, &res)
	if res.Accepted != len(batch.Records) {
		t.Fatalf("usage seed: %+v", res)
	}
}

// hostConsoles is hostd's console server (hostd/console) for the fake host; each console is a
// stand-in guest that prints a login prompt and echoes each line back as "typed: LINE".
type hostConsoles struct {
	url  string
	auth atomic.Value // [2]any{host id, ed25519.PublicKey}
}

func echoConsoles(t *testing.T) *hostConsoles {
	hc := &hostConsoles{}
	hc.auth.Store([2]any{"", ed25519.PublicKey(nil)})
	cs := &console.Server{
		Auth: func() (string, ed25519.PublicKey) {
			a := hc.auth.Load().([2]any)
			return a[0].(string), a[1].(ed25519.PublicKey)
		},
		Open: func(string) (io.ReadWriteCloser, error) {
			guest, con := net.Pipe()
			go func() {
				defer guest.Close()
				guest.Write([]byte("\r\ne2e-vm login: "))
				line := []byte{}
				buf := make([]byte, 256)
				for {
					n, err := guest.Read(buf)
					if err != nil {
						return
					}
					for _, b := range buf[:n] {
						if b == '\r' {
							guest.Write([]byte("\r\ntyped: " + string(line) + "\r\n"))
							line = line[:0]
							continue
						}
						line = append(line, b)
						guest.Write([]byte{b})
					}
				}
			}()
			return con, nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(cs.Handler(ctx))
	t.Cleanup(func() { cancel(); srv.Close() })
	hc.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return hc
}

// registered gives the console server the host id and grant key the heartbeat answered.
func (hc *hostConsoles) registered(ack api.HostAck) {
	key, _ := base64.StdEncoding.DecodeString(ack.ConsoleKey)
	hc.auth.Store([2]any{ack.HostID, ed25519.PublicKey(key)})
}

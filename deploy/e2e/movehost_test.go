package e2e

// The harness of the host drain tests (hostdrain_test.go): hostds on their own test-driver
// states, passes, disk patterns and billing allocations.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/transfer"
	"gpucloud/hostd/virt"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// switchable is the apiserver address the hostds of a test use: a proxy whose backend can be
// replaced, as a load balancer's is when the apiserver restarts.
type switchable struct{ target atomic.Pointer[url.URL] }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	httputil.NewSingleHostReverseProxy(s.target.Load()).ServeHTTP(w, r)
}

func (s *switchable) set(t *testing.T, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s.target.Store(u)
}

// startMoveHost starts a hostd for a multi-host test: its own libvirt test driver state
// (test:///<node.xml>; test:///default's domains are shared by every connection of the process,
// so two hostds on it would remove each other's), data dir, volume pool and transfer listener.
func startMoveHost(t *testing.T, env *sdktest.Env, apiURL, name string, vcpus int, network ...string) *host {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	node := filepath.Join(dir, "node.xml")
	if err := os.WriteFile(node, fmt.Appendf(nil, `<node><cpu><mhz>2000</mhz><model>i686</model><nodes>1</nodes><sockets>1</sockets>
<cores>%d</cores><threads>1</threads></cpu><memory>16777216</memory></node>`, vcpus), 0o644); err != nil {
		t.Fatal(err)
	}
	hv, err := virt.Open("test://"+node, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	d, err := env.OperatorClient.CreateHost(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.NewHTTP(apiURL, d.Credential)
	if err != nil {
		t.Fatal(err)
	}
	exports := &transfer.Exports{}
	ts := httptest.NewServer(exports.Handler())
	t.Cleanup(ts.Close)
	h := &host{t: t, id: d.ID, cp: cp, hv: hv, data: filepath.Join(dir, "data")}
	nw := virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}
	if len(network) > 0 {
		nw = virt.Network{Kind: network[0]}
	}
	h.r, err = reconcile.New(reconcile.Config{ControlPlane: cp, Hypervisor: hv, DataDir: h.data, ImagesDir: filepath.Join(dir, "images"),
		Network: nw, Hostname: name, Ports: reconcile.PortRange{First: 25000, Last: 25099},
		PublicHost: name + ".example", VolumePool: "vols-" + name, Version: "e2e", StopGrace: time.Second,
		Exports: exports, TransferEndpoint: strings.TrimPrefix(ts.URL, "http://"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if h.r.HostID() != d.ID {
		t.Fatalf("hostd learnt host id %q, the operator created %q", h.r.HostID(), d.ID)
	}
	return h
}

// registerBase makes a small base image and registers it as "base" (a file:// source each hostd
// fetches into its own images dir); it returns the image's directory.
func registerBase(t *testing.T, env *sdktest.Env) string {
	t.Helper()
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("base image: %v %s", err, out)
	}
	env.ImageFile(t, "base", base)
	return dir
}

// pass runs one reconcile pass of each host in order.
func pass(t *testing.T, hs ...*host) {
	t.Helper()
	for _, h := range hs {
		if err := h.r.Once(context.Background()); err != nil {
			t.Fatalf("reconcile pass of %s: %v", h.id, err)
		}
	}
}

// qemuIO runs qemu-io commands on a qcow2 file (write or check a pattern).
func qemuIO(t *testing.T, file string, cmd string) {
	t.Helper()
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", cmd, file).CombinedOutput(); err != nil ||
		strings.Contains(string(out), "fail") || strings.Contains(string(out), "Pattern verification failed") {
		t.Fatalf("qemu-io %q %s: %v %s", cmd, file, err, out)
	}
}

func cpuType(t *testing.T, env *sdktest.Env, name string, vcpus int) string {
	t.Helper()
	it, err := env.OperatorClient.CreateInstanceType(context.Background(), sdk.CreateInstanceTypeRequest{Name: name,
		VCPUs: vcpus, MemoryMiB: 512, DiskGiB: 1, Tier: "dedicated", PricePerHour: 100})
	if err != nil {
		t.Fatal(err)
	}
	return it.ID
}

// vmAllocations lists an instance's billing allocations of kind as "start-end" (end "open").
func vmAllocations(t *testing.T, env *sdktest.Env, id, kind string) []string {
	t.Helper()
	rows, err := env.Store.Pool.Query(context.Background(), `SELECT started_at, ended_at FROM billing_allocations
		WHERE instance_id = $1 AND kind = $2 ORDER BY id`, id, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var start time.Time
		var end *time.Time
		if err := rows.Scan(&start, &end); err != nil {
			t.Fatal(err)
		}
		e := "open"
		if end != nil {
			e = end.UTC().Format(time.RFC3339)
		}
		out = append(out, start.UTC().Format(time.RFC3339)+"-"+e)
	}
	return out
}

func stateOf(doms []virt.Domain, id string) virt.State {
	for _, d := range doms {
		if d.Meta.InstanceID == id {
			return d.State
		}
	}
	return "absent"
}

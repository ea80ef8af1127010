// Package e2e runs the platform's parts together: the real apiserver (billing mounted) on
// PostgreSQL, hostd's reconciler on libvirt's test driver with a fake sysfs tree, and a
// gpuserverd process on its simulated backend with the guest library in front of it.
package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/sriov"
	"gpucloud/hostd/sriov/sriovtest"
	"gpucloud/hostd/virt"
	"gpucloud/internal/pgtest"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// host is one hostd: its reconciler driven pass by pass, over libvirt's test driver.
type host struct {
	t    *testing.T
	id   string
	cp   *controlplane.HTTP
	r    *reconcile.Reconciler
	hv   *virt.Hypervisor
	pool *sriov.Pool
	data string
}

// startHost registers a host as an operator would (POST /v1/hosts) and starts hostd with the
// credential it got. lib is the guest library put into every seed.
func startHost(t *testing.T, env *sdktest.Env, lib string, vfs int) *host {
	t.Helper()
	return startHostWith(t, env, lib, vfs, nil)
}

// startHostWith is startHost with tweak applied to hostd's configuration.
func startHostWith(t *testing.T, env *sdktest.Env, lib string, vfs int, tweak func(*reconcile.Config)) *host {
	t.Helper()
	ctx := context.Background()
	d, cp := registerHost(t, env, "node-e2e")
	hv, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	dir := t.TempDir()
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(images, "base.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("base image: %v %s", err, out)
	}
	env.ImageFile(t, "base", filepath.Join(images, "base.qcow2"))
	pool, err := sriov.NewPool(ctx, sriovtest.Tree(t, vfs, vfs), filepath.Join(dir, "data", "vfs"), &sriovtest.Fabric{}, true)
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, cp: cp, hv: hv, pool: pool, data: filepath.Join(dir, "data")}
	cfg := reconcile.Config{ControlPlane: cp, Hypervisor: hv, VFs: pool, DataDir: h.data,
		ImagesDir: images, GuestLibrary: lib, Network: virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}, Hostname: "node-e2e",
		Ports: reconcile.PortRange{First: 24000, Last: 24099}, PublicHost: "node-e2e.example",
		Version: "e2e", StopGrace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tweak != nil {
		tweak(&cfg)
	}
	h.r, err = reconcile.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if h.id = h.r.HostID(); h.id != d.ID {
		t.Fatalf("hostd learnt host id %q, the operator created %q", h.id, d.ID)
	}
	return h
}

// registerHost creates a host as an operator would and a control-plane client with its credential.
func registerHost(t *testing.T, env *sdktest.Env, name string) (sdk.NewDaemon, *controlplane.HTTP) {
	t.Helper()
	d, err := env.OperatorClient.CreateHost(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.NewHTTP(env.URL, d.Credential)
	if err != nil {
		t.Fatal(err)
	}
	return d, cp
}

// converge runs reconcile passes until the instance reaches state (at most 20 passes).
func (h *host) converge(c *sdk.Client, id, state string) sdk.Instance {
	h.t.Helper()
	ctx := context.Background()
	var inst sdk.Instance
	for range 20 {
		if err := h.r.Once(ctx); err != nil {
			h.t.Fatalf("reconcile pass: %v", err)
		}
		var err error
		if inst, err = c.GetInstance(ctx, id); err != nil {
			h.t.Fatal(err)
		}
		if inst.State == state {
			return inst
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("instance %s is %s after 20 passes, want %s", id, inst.State, state)
	return inst
}

// history is the instance's states in order, from its events.
func history(t *testing.T, c *sdk.Client, id string) string {
	t.Helper()
	evs, err := c.InstanceEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range evs {
		if len(states) == 0 || states[len(states)-1] != e.To {
			states = append(states, e.To)
		}
	}
	return strings.Join(states, ",")
}

// seedFile reads one file out of an instance's seed ISO (Rock Ridge names).
func seedFile(t *testing.T, h *host, id, path string) string {
	t.Helper()
	out, err := exec.Command("isoinfo", "-R", "-i", filepath.Join(h.data, "instances", id, "seed.iso"), "-x", path).Output()
	if err != nil {
		t.Fatalf("isoinfo %s: %v", path, err)
	}
	return string(out)
}

// step logs how long a step of a test took.
func step(t *testing.T, start *time.Time, what string) {
	t.Helper()
	now := time.Now()
	t.Logf("%-52s %8.1f ms", what, float64(now.Sub(*start).Microseconds())/1000)
	*start = now
}

// sharedType makes a shared-tier type of one GPU of model that fits libvirt's test driver
// (its node offers 3 GiB of memory).
func sharedType(t *testing.T, env *sdktest.Env, name, model string) string {
	t.Helper()
	it, err := env.OperatorClient.CreateInstanceType(context.Background(), sdk.CreateInstanceTypeRequest{Name: name,
		VCPUs: 1, MemoryMiB: 512, DiskGiB: 1, GPUModelID: model, GPUCount: 1, Tier: "shared", PricePerHour: 100})
	if err != nil {
		t.Fatal(err)
	}
	return it.ID
}

package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane/cpfake"
	"gpucloud/hostd/sriov"
	"gpucloud/hostd/sriov/sriovtest"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/virt"
)

// env is one host under test: a fake control plane, libvirt's test driver (a private instance
// per test, standing for libvirtd, which outlives hostd), a fake sysfs tree and a data dir.
type env struct {
	t       testing.TB
	cp      *cpfake.Server
	hv      *virt.Hypervisor
	pool    *sriov.Pool
	fabric  *sriovtest.Fabric
	sysfs   string
	data    string
	images  string
	lib     string
	shm     *IvshmemConfig // ivshmem channels, when a test turns them on
	net     virt.Network   // the VMs' network; zero: QEMU user networking
	fw      *tenantfw.Firewall
	qemuUID uint32
	qemuGID uint32
}

// foreignNode is the test driver's host: it already runs a domain that is not hostd's.
const foreignNode = `<node>
  <domain type="test">
    <name>someone-elses-vm</name>
    <memory unit="MiB">64</memory>
    <os><type>hvm</type></os>
  </domain>
</node>
`

func newEnv(t testing.TB, vfs int) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, cp: cpfake.New(t, "host-secret"), data: filepath.Join(dir, "data"), images: filepath.Join(dir, "images"), fabric: &sriovtest.Fabric{}}
	node := filepath.Join(dir, "node.xml")
	if err := os.WriteFile(node, []byte(foreignNode), 0o644); err != nil {
		t.Fatal(err)
	}
	hv, err := virt.Open("test://"+node, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	e.hv = hv
	if err := os.MkdirAll(e.images, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(e.images, "base.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("base image: %v %s", err, out)
	}
	e.lib = filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(e.lib, []byte("\x7fELF test guest library"), 0o755); err != nil {
		t.Fatal(err)
	}
	if vfs > 0 {
		e.sysfs = sriovtest.Tree(t, vfs, vfs)
		pool, err := sriov.NewPool(context.Background(), e.sysfs, filepath.Join(e.data, "vfs"), e.fabric, true)
		if err != nil {
			t.Fatal(err)
		}
		e.pool = pool
	}
	return e
}

// hostd starts a fresh reconciler over the env's libvirt and files, as a restarted hostd.
func (e *env) hostd() *Reconciler {
	e.t.Helper()
	cfg := Config{
		ControlPlane: e.cp.Client(e.t), Hypervisor: e.hv, DataDir: e.data, ImagesDir: e.images,
		GuestLibrary: e.lib, Network: e.net, Hostname: "node1", Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Ivshmem: e.shm, VolumePool: "gpucloud-volumes",
		Firewall: e.fw, QEMUUID: e.qemuUID, QEMUGID: e.qemuGID,
	}
	if cfg.Network.Kind == "" {
		cfg.Network.Kind = "user"
	}
	if e.pool != nil {
		cfg.VFs = e.pool
	}
	r, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) domains() map[string]virt.Domain {
	e.t.Helper()
	doms, err := e.hv.List()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]virt.Domain{}
	for _, d := range doms {
		out[d.Meta.InstanceID] = d
	}
	return out
}

func (e *env) instanceDirs() []string {
	entries, _ := os.ReadDir(filepath.Join(e.data, "instances"))
	var out []string
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}

func (e *env) claims() map[string]sriov.Assignment {
	e.t.Helper()
	if e.pool == nil {
		return nil
	}
	c, err := e.pool.Claims()
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) observed(id string) api.InstanceObserved {
	e.t.Helper()
	o, ok := e.cp.Observed(id)
	if !ok {
		e.t.Fatalf("no state reported for %s", id)
	}
	return o
}

func instance(id, tenant string, pkey uint16) api.DesiredInstance {
	return api.DesiredInstance{
		ID: id, TenantID: tenant, Name: "vm-" + id, DesiredState: api.DesiredRunning,
		Spec:         api.InstanceSpec{VCPUs: 2, MemoryMiB: 256, DiskGiB: 1, Image: "base"},
		GPU:          &api.GPUGrant{GPUServerID: "gs1", Endpoints: []string{"10.1.0.1:7000"}, Model: "H100", Tier: "shared"},
		Token:        api.SessionToken{Token: "tok-" + id, ExpiresAt: time.Now().Add(time.Hour)},
		PartitionKey: pkey,
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("vm%d", i)
	}
	return out
}

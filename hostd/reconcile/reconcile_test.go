package reconcile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/virt"
)

func TestLifecycleThroughControlPlane(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	h := e.hostd()
	e.cp.Put(instance("a1", "tenantA", 0x11))
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	n, rep := e.cp.Heartbeats()
	if n != 1 || rep.Capacity.InfiniBandVFs != 8 || rep.Hostname != "node1" || !strings.HasPrefix(rep.Hypervisor, "test://") {
		t.Fatalf("heartbeat %d %+v", n, rep)
	}
	o := e.observed("a1")
	claim := e.claims()["a1"]
	if o.State != api.ObservedRunning || o.VFPCIAddress == "" || o.VFPCIAddress != claim.VF.PCIAddress {
		t.Fatalf("observed %+v, claim %+v", o, claim)
	}
	x, err := e.hv.XML(virt.DomainName("a1"))
	if err != nil {
		t.Fatal(err)
	}
	p := h.paths("a1")
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	var disks []string
	for _, d := range dx.Devices.Disks {
		disks = append(disks, d.Device+"="+d.Source.File.File)
	}
	if strings.Join(disks, " ") != "disk="+p.disk+" cdrom="+p.seed {
		t.Errorf("disks %v", disks)
	}
	if hd := dx.Devices.Hostdevs; len(hd) != 1 || hd[0].SubsysPCI == nil {
		t.Errorf("hostdevs %+v", hd)
	} else if a := hd[0].SubsysPCI.Source.Address; *a.Bus != 0x3b || *a.Function != uint(o.VFPCIAddress[11]-'0') {
		t.Errorf("VF address bus %x function %x, want %s", *a.Bus, *a.Function, o.VFPCIAddress)
	}
	if e.fabric.Partitions[claim.PortGUID.String()] != 0x11 {
		t.Errorf("partition key not set from the tenant: %v", e.fabric.Partitions)
	}
	if _, err := os.Stat(p.disk); err != nil {
		t.Fatalf("overlay disk: %v", err)
	}

	e.cp.Reboot("a1")
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if o := e.observed("a1"); o.RebootGeneration != 1 || o.State != api.ObservedRunning {
		t.Fatalf("after reboot: %+v", o)
	}
	// A second pass must not reboot again: the generation is recorded in the domain.
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if d := e.domains()["a1"]; d.Meta.RebootGeneration != 1 {
		t.Fatalf("generation %d", d.Meta.RebootGeneration)
	}

	e.cp.SetDesired("a1", api.DesiredStopped)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if o := e.observed("a1"); o.State != api.ObservedStopped || e.domains()["a1"].State != virt.Stopped {
		t.Fatalf("after stop: %+v", o)
	}
	e.cp.SetDesired("a1", api.DesiredRunning)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if e.domains()["a1"].State != virt.Running {
		t.Fatal("not restarted")
	}

	e.cp.SetDesired("a1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if o := e.observed("a1"); o.State != api.ObservedDeleted || e.cp.Listed("a1") {
		t.Fatalf("after delete: %+v", o)
	}
	if len(e.domains()) != 0 || len(e.instanceDirs()) != 0 || len(e.claims()) != 0 {
		t.Fatalf("leftovers: domains %v dirs %v claims %v", e.domains(), e.instanceDirs(), e.claims())
	}
	if got := e.cp.History("a1"); got != "provisioning,running,stopped,running,deleted" {
		t.Fatalf("state history %q", got)
	}
	usage := e.cp.Usage()
	if len(usage) == 0 || usage[0].Kind != api.UsageVM || usage[0].TenantID != "tenantA" || usage[0].InstanceID != "a1" || usage[0].Source != "host-node1" || usage[0].VCPUs != 2 {
		t.Fatalf("usage %+v", usage)
	}
}

func TestEightVFsServeEightVMsAndRefuseTheNinth(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	h := e.hostd()
	for _, id := range ids(9) {
		e.cp.Put(instance(id, "t-"+id, 0x20))
	}
	err := h.Once(ctx)
	if err == nil || !strings.Contains(err.Error(), "vm8") {
		t.Fatalf("pass error %v", err)
	}
	vfs := map[string]bool{}
	for _, id := range ids(8) {
		o := e.observed(id)
		if o.State != api.ObservedRunning || vfs[o.VFPCIAddress] {
			t.Fatalf("%s: %+v (VF reused: %v)", id, o, vfs[o.VFPCIAddress])
		}
		vfs[o.VFPCIAddress] = true
	}
	o := e.observed("vm8")
	if o.State != api.ObservedFailed || !strings.Contains(o.Reason, "no free InfiniBand VF") || !strings.Contains(o.Reason, "all 8 VFs") {
		t.Fatalf("ninth: %+v", o)
	}
	if _, has := e.domains()["vm8"]; has || len(e.instanceDirs()) != 8 || len(e.claims()) != 8 {
		t.Fatalf("ninth left state: dirs %v", e.instanceDirs())
	}
	// Once a VM goes, the ninth gets its VF.
	e.cp.SetDesired("vm3", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if o := e.observed("vm8"); o.State != api.ObservedRunning {
		t.Fatalf("ninth after a delete: %+v", o)
	}
}

// TestKilledAnywhereConverges kills hostd at each step of creating and of deleting an instance
// and restarts it: the host converges with nothing leaked and nothing made twice.
func TestKilledAnywhereConverges(t *testing.T) {
	for _, point := range []string{"vf-allocated", "disk-created", "seed-written", "defined", "started"} {
		t.Run("create/"+point, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, 8)
			first := e.hostd()
			first.crashAt = func(p string) bool { return p == point }
			e.cp.Put(instance("k1", "t1", 5))
			if err := first.Once(ctx); !errors.Is(err, errKilled) {
				t.Fatalf("want killed pass, got %v", err)
			}
			vf := e.claims()["k1"].VF.PCIAddress

			restarted := e.hostd()
			for range 2 {
				if err := restarted.Once(ctx); err != nil {
					t.Fatal(err)
				}
			}
			doms := e.domains()
			if len(doms) != 1 || doms["k1"].State != virt.Running {
				t.Fatalf("domains after restart %+v", doms)
			}
			if c := e.claims(); len(c) != 1 || c["k1"].VF.PCIAddress != vf {
				t.Fatalf("claims after restart %+v (VF was %s)", c, vf)
			}
			if o := e.observed("k1"); o.State != api.ObservedRunning || o.VFPCIAddress != vf {
				t.Fatalf("observed %+v", o)
			}
			if files := listFiles(t, restarted.paths("k1").dir); files != "disk.qcow2 seed.iso token.json" {
				t.Fatalf("instance files %q", files)
			}
		})
	}
	for _, point := range []string{"undefined", "vf-released"} {
		t.Run("delete/"+point, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, 8)
			first := e.hostd()
			e.cp.Put(instance("k2", "t1", 5))
			if err := first.Once(ctx); err != nil {
				t.Fatal(err)
			}
			e.cp.SetDesired("k2", api.DesiredDeleted)
			first.crashAt = func(p string) bool { return p == point }
			if err := first.Once(ctx); !errors.Is(err, errKilled) {
				t.Fatalf("want killed pass, got %v", err)
			}
			if err := e.hostd().Once(ctx); err != nil {
				t.Fatal(err)
			}
			if len(e.domains()) != 0 || len(e.instanceDirs()) != 0 || len(e.claims()) != 0 || e.cp.Listed("k2") {
				t.Fatalf("leftovers: domains %v dirs %v claims %v", e.domains(), e.instanceDirs(), e.claims())
			}
		})
	}
}

func listFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

func TestLeftoversOfADeadHostdAreCollected(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	// A hostd killed mid-provisioning of an instance since deleted left a VF claim and files.
	if _, err := e.pool.Allocate(ctx, "gone", 3); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(e.data, "instances", "gone"), 0o755)
	// A domain of ours for an instance no longer placed here; the test node also runs
	// somebody else's domain, which hostd must leave alone.
	h := e.hostd()
	e.cp.Put(instance("orphan", "t1", 3))
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	e.cp.Forget("orphan") // placed elsewhere, or gone from the apiserver entirely
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if len(e.domains()) != 0 || len(e.instanceDirs()) != 0 || len(e.claims()) != 0 {
		t.Fatalf("leftovers: domains %v dirs %v claims %v", e.domains(), e.instanceDirs(), e.claims())
	}
	if _, err := e.hv.XML("someone-elses-vm"); err != nil {
		t.Fatalf("foreign domain touched: %v", err)
	}
}

func TestMalformedSpecLeavesHostAsItWas(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	h := e.hostd()
	e.cp.Put(instance("good", "t1", 1))
	bad := instance("bad", "t2", 1)
	bad.Spec.VCPUs = 0
	bad.Spec.Image = "../../etc/passwd"
	e.cp.Put(bad)
	err := h.Once(ctx)
	if err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("pass error %v", err)
	}
	o := e.observed("bad")
	if o.State != api.ObservedFailed || !strings.Contains(o.Reason, "spec.vcpus 0") || !strings.Contains(o.Reason, "spec.image") {
		t.Fatalf("bad: %+v", o)
	}
	if _, has := e.domains()["bad"]; has {
		t.Fatal("domain defined for a malformed spec")
	}
	if dirs := e.instanceDirs(); len(dirs) != 1 || dirs[0] != "good" || len(e.claims()) != 1 {
		t.Fatalf("malformed spec left files %v claims %v", dirs, e.claims())
	}
	if e.observed("good").State != api.ObservedRunning {
		t.Fatal("a bad neighbour stopped a good instance")
	}
}

func TestTokenRenewedBeforeExpiry(t *testing.T) {
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo not installed")
	}
	ctx := context.Background()
	e := newEnv(t, 0)
	h := e.hostd()
	in := instance("r1", "t1", 0)
	in.Token.ExpiresAt = time.Now().Add(5 * time.Minute) // inside the 10-minute renewal margin
	e.cp.Put(in)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if e.cp.Renewals("r1") != 1 {
		t.Fatalf("renewals %d", e.cp.Renewals("r1"))
	}
	conf, err := exec.Command("isoinfo", "-i", h.paths("r1").seed, "-R", "-x", "/gpucloud/guest.conf").Output()
	if err != nil || !strings.Contains(string(conf), "GPUCLOUD_TOKEN=tok-r1-r1\n") || !strings.Contains(string(conf), "GPUCLOUD_ENDPOINT=10.1.0.1:7000\n") {
		t.Fatalf("seed guest.conf: %v\n%s", err, conf)
	}
	// The renewed token lasts an hour: further passes do not renew again.
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if e.cp.Renewals("r1") != 1 {
		t.Fatalf("renewed again: %d", e.cp.Renewals("r1"))
	}
	// 55 minutes on, the running VM's token is renewed and its seed rebuilt in place.
	later := time.Now().Add(55 * time.Minute)
	h.cfg.Now = func() time.Time { return later }
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	conf, err = exec.Command("isoinfo", "-i", h.paths("r1").seed, "-R", "-x", "/gpucloud/guest.conf").Output()
	if e.cp.Renewals("r1") != 2 || err != nil || !strings.Contains(string(conf), "GPUCLOUD_TOKEN=tok-r1-r2\n") {
		t.Fatalf("second renewal %d: %v\n%s", e.cp.Renewals("r1"), err, conf)
	}
	if e.domains()["r1"].State != virt.Running {
		t.Fatal("token renewal disturbed the VM")
	}
}

func TestTenantsGetTheirOwnPartitionAndIdentity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	h := e.hostd()
	e.cp.Put(instance("ta", "tenantA", 0x100))
	e.cp.Put(instance("tb", "tenantB", 0x200))
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	c := e.claims()
	if c["ta"].VF.PCIAddress == c["tb"].VF.PCIAddress || c["ta"].PortGUID.String() == c["tb"].PortGUID.String() {
		t.Fatal("two tenants share a VF or a GUID")
	}
	if e.fabric.Partitions[c["ta"].PortGUID.String()] != 0x100 || e.fabric.Partitions[c["tb"].PortGUID.String()] != 0x200 {
		t.Fatalf("partitions %v", e.fabric.Partitions)
	}
	for _, id := range []string{"ta", "tb"} {
		if d := e.domains()[id]; d.Meta.TenantID != map[string]string{"ta": "tenantA", "tb": "tenantB"}[id] {
			t.Fatalf("domain %s tenant %q", id, d.Meta.TenantID)
		}
	}
	for _, id := range []string{"ta", "tb"} {
		seedPath := h.paths(id).seed
		if st, err := os.Stat(seedPath); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("seed of %s: %v %v, want mode 0600", id, st.Mode(), err)
		}
		b, _ := os.ReadFile(seedPath)
		other := map[string]string{"ta": "tok-tb", "tb": "tok-ta"}[id]
		if !strings.Contains(string(b), "tok-"+id) || strings.Contains(string(b), other) {
			t.Fatalf("seed of %s does not hold exactly its own token", id)
		}
	}
	for _, u := range e.cp.Usage() {
		if (u.InstanceID == "ta") != (u.TenantID == "tenantA") {
			t.Fatalf("usage billed to the wrong tenant: %+v", u)
		}
	}
}

func TestImageWithKernelBootsDirectly(t *testing.T) {
	e := newEnv(t, 0)
	for ext, content := range map[string]string{".vmlinuz": "kernel", ".initrd": "initrd", ".cmdline": "root=/dev/vda ro console=ttyS0 quiet\n"} {
		if err := os.WriteFile(filepath.Join(e.images, "base"+ext), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := e.hostd()
	e.cp.Put(instance("kb", "t1", 0))
	if err := h.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	x, err := e.hv.InactiveXML(virt.DomainName("kb"))
	if err != nil {
		t.Fatal(err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if dx.OS.Kernel != filepath.Join(e.images, "base.vmlinuz") || dx.OS.Initrd != filepath.Join(e.images, "base.initrd") || dx.OS.Cmdline != "root=/dev/vda ro console=ttyS0 quiet" {
		t.Fatalf("os %+v", dx.OS)
	}
}

func TestControlPlaneOutageTouchesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	e.cp.Put(instance("o1", "t1", 1))
	if err := e.hostd().Once(ctx); err != nil {
		t.Fatal(err)
	}
	h := e.hostd()
	down, err := controlplane.NewHTTP("http://127.0.0.1:1", "host-secret")
	if err != nil {
		t.Fatal(err)
	}
	h.cfg.ControlPlane = down
	if err := h.Once(ctx); err == nil {
		t.Fatal("pass without a control plane succeeded")
	}
	if d := e.domains()["o1"]; d.State != virt.Running || len(e.claims()) != 1 || len(e.instanceDirs()) != 1 {
		t.Fatalf("outage changed the host: %+v", d)
	}
}

// A drain moved the instance's GPU sessions to another GPU server: the running VM's seed is
// rebuilt with the new endpoint (its new processes dial it), even with the same token.
func TestSeedFollowsTheGPUServer(t *testing.T) {
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo not installed")
	}
	ctx := context.Background()
	e := newEnv(t, 0)
	h := e.hostd()
	in := instance("m1", "t1", 0)
	e.cp.Put(in)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	in.GPU.Endpoints = []string{"10.1.0.2:7000"}
	e.cp.Put(in)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	conf, err := exec.Command("isoinfo", "-i", h.paths("m1").seed, "-R", "-x", "/gpucloud/guest.conf").Output()
	if err != nil || !strings.Contains(string(conf), "GPUCLOUD_ENDPOINT=10.1.0.2:7000\n") {
		t.Fatalf("seed guest.conf after the move: %v\n%s", err, conf)
	}
	if e.domains()["m1"].State != virt.Running {
		t.Fatal("the seed's swap disturbed the VM")
	}
}

package virt_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"gpucloud/hostd/virt"
)

func spec(dir, id string) virt.DomainSpec {
	return virt.DomainSpec{
		Meta: virt.Metadata{InstanceID: id, TenantID: "t1"},
		Type: "test", VCPUs: 2, MemoryMiB: 512,
		Disk: filepath.Join(dir, "disk.qcow2"), Seed: filepath.Join(dir, "seed.iso"),
		ConsoleLog: filepath.Join(dir, "console.log"), VFPCIAddress: "0000:3b:00.2",
		Network: virt.Network{Kind: "network", Name: "default"},
	}
}

func TestDomainXMLCarriesDevices(t *testing.T) {
	x, err := virt.DomainXML(spec("/d", "abc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<name>gpucloud-abc</name>`, `<vcpu>2</vcpu>`, `<memory unit="MiB">512</memory>`,
		`<source file="/d/disk.qcow2">`, `<target dev="vda" bus="virtio">`,
		`device="cdrom"`, `<source file="/d/seed.iso">`,
		`<hostdev mode="subsystem" type="pci" managed="no">`, `<address domain="0x0000" bus="0x3b" slot="0x00" function="0x2">`,
		`<serial type="pty">`, `<log file="/d/console.log" append="on">`, `<model type="virtio">`, `<source network="default">`,
		`xmlns:gpucloud="` + virt.MetadataNS + `"`, `<id>abc</id>`,
	} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(x)
	}
}

func TestInvalidSpec(t *testing.T) {
	s := spec("/d", "../etc")
	s.VCPUs = 0
	s.VFPCIAddress = "zz"
	s.Shmem = &virt.Shmem{Name: "a/b", Bytes: 3 << 20}
	_, err := virt.DomainXML(s)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"instance id", "vcpus 0", "PCI address", `shmem name "a/b"`, "shmem size 3145728"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestLifecycleOnTestDriver(t *testing.T) {
	h, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.DomainType() != "test" {
		t.Fatalf("domain type %q", h.DomainType())
	}
	s := spec(t.TempDir(), "life1")
	if err := h.Define(s); err != nil {
		t.Fatal(err)
	}
	defer h.Undefine("gpucloud-life1")
	doms, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	// test:///default has its own domain "test": hostd must not claim it.
	if len(doms) != 1 || doms[0].Meta.InstanceID != "life1" || doms[0].Meta.TenantID != "t1" || doms[0].State != virt.Stopped {
		t.Fatalf("List = %+v", doms)
	}
	if err := h.Start("gpucloud-life1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Reboot("gpucloud-life1", 3); err != nil {
		t.Fatal(err)
	}
	doms, _ = h.List()
	if doms[0].State != virt.Running || doms[0].Meta.RebootGeneration != 3 {
		t.Fatalf("after reboot: %+v", doms[0])
	}
	if err := h.ChangeMedia("gpucloud-life1", "/new/seed.iso"); err != nil {
		t.Fatal(err)
	}
	if x, _ := h.InactiveXML("gpucloud-life1"); !strings.Contains(x, "/new/seed.iso") {
		t.Fatalf("media not changed:\n%s", x)
	}
	if err := h.Shutdown("gpucloud-life1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Undefine("gpucloud-life1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Undefine("gpucloud-life1"); err != nil {
		t.Fatalf("second undefine: %v", err)
	}
	if err := h.Start("gpucloud-life1"); !errors.Is(err, virt.ErrNotFound) {
		t.Fatalf("start of undefined domain: %v", err)
	}
	if doms, _ := h.List(); len(doms) != 0 {
		t.Fatalf("left %+v", doms)
	}
}

func TestCreateOverlay(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	ov := filepath.Join(dir, "disk.qcow2")
	if err := virt.CreateOverlay(context.Background(), base, ov, 2); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("qemu-img", "info", ov).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "backing file: "+base) || !strings.Contains(string(out), "virtual size: 2 GiB") {
		t.Fatalf("overlay info: %v\n%s", err, out)
	}
	if err := virt.CreateOverlay(context.Background(), filepath.Join(dir, "missing"), filepath.Join(dir, "x.qcow2"), 1); err == nil {
		t.Fatal("overlay over a missing base accepted")
	}
}

// A user-mode NIC with forwards is handed to QEMU with a hostfwd per port, bound where asked.
func TestDomainXMLForwardsPorts(t *testing.T) {
	s := spec("/d", "abc")
	s.Network = virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}
	s.Meta.Forwards = []virt.Forward{{Guest: 22, Host: 22001}, {Guest: 8888, Host: 22002}}
	x, err := virt.DomainXML(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, `user,id=gpcnet,hostfwd=tcp:127.0.0.1:22001-:22,hostfwd=tcp:127.0.0.1:22002-:8888`) ||
		!strings.Contains(x, `virtio-net-pci,netdev=gpcnet,bus=pcie.0,addr=0x10`) || strings.Contains(x, "<interface") {
		t.Fatalf("domain XML:\n%s", x)
	}
	if !strings.Contains(x, `<guest>22</guest>`) && !strings.Contains(x, `guest="22"`) {
		t.Fatalf("forwards not in hostd's metadata:\n%s", x)
	}
	s.Network.ForwardBind = "not-an-ip"
	if _, err := virt.DomainXML(s); err == nil {
		t.Fatal("bad bind address accepted")
	}
}

// RunAs pins the user QEMU runs as with a static DAC label (hostd's user-mode filter matches
// that uid), whatever qemu.conf says; without it the domain has no label of its own.
func TestDomainXMLRunAs(t *testing.T) {
	s := spec("/d", "abc")
	s.Network = virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}
	s.Meta.Forwards = []virt.Forward{{Guest: 22, Host: 22001}}
	x, err := virt.DomainXML(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(x, "<seclabel") {
		t.Fatalf("a label without RunAs:\n%s", x)
	}
	s.RunAs = &virt.RunAs{UID: 999, GID: 995}
	if x, err = virt.DomainXML(s); err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if want := (libvirtxml.DomainSecLabel{Type: "static", Model: "dac", Relabel: "yes", Label: "+999:+995"}); len(d.SecLabel) != 1 || d.SecLabel[0] != want {
		t.Fatalf("labels %+v, want only %+v:\n%s", d.SecLabel, want, x)
	}
	for _, root := range []virt.RunAs{{UID: 0, GID: 995}, {UID: 999, GID: 0}} {
		s.RunAs = &root
		if _, err := virt.DomainXML(s); err == nil || !strings.Contains(err.Error(), "run-as") {
			t.Errorf("run as %+v: %v, want an error naming run-as", root, err)
		}
	}
}

// The test driver has no consoles: hostd must say so (the real attach is exercised on
// qemu:///system by deploy/e2e's TestRealVMTenantJourney).
func TestOpenConsoleOnTestDriver(t *testing.T) {
	h, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.OpenConsole("gpucloud-nosuch"); !errors.Is(err, virt.ErrNotFound) {
		t.Fatalf("console of a missing domain: %v", err)
	}
	if err := h.Define(spec(t.TempDir(), "cons1")); err != nil {
		t.Fatal(err)
	}
	defer h.Undefine("gpucloud-cons1")
	if err := h.Start("gpucloud-cons1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.OpenConsole("gpucloud-cons1"); !errors.Is(err, virt.ErrConsoleUnsupported) {
		t.Fatalf("console on the test driver: %v", err)
	}
}

package reconcile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane/cpfake"
	"gpucloud/hostd/virt"
	"gpucloud/hostd/vmtest"
)

// TestRealVMBootsThroughHostd boots a real guest with QEMU through libvirt (qemu:///system) and
// hostd's reconciler: the guest's init reads its seed from the cdrom and connects to the
// endpoint written there (a listener of this test, reached through user-mode networking).
// Domain type qemu (TCG): nested KVM guests hang at boot on the CI machines.
func TestRealVMBootsThroughHostd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it starts libvirtd and uses qemu:///system")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := vmtest.EnsureLibvirtd(ctx); err != nil {
		t.Fatal(err)
	}
	guest, err := vmtest.BuildGuest(ctx, filepath.Join(repoRoot(t), ".data", "vmtest"))
	if err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hello := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Minute))
		line, _ := bufio.NewReader(c).ReadString('\n')
		hello <- strings.TrimSpace(line)
	}()

	hv, err := virt.Open("qemu:///system", "qemu")
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Close()
	dir := t.TempDir()
	// Where qemu.conf runs QEMU as libvirt-qemu, it must be able to walk to the VM's files.
	os.Chmod(dir, 0o711)
	os.Chmod(filepath.Dir(dir), 0o711)
	images := filepath.Join(dir, "images")
	os.MkdirAll(images, 0o755)
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(images, "base.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cp := cpfake.New(t, "host-secret")
	r, err := New(Config{
		ControlPlane: cp.Client(t), Hypervisor: hv, DataDir: filepath.Join(dir, "data"), ImagesDir: images,
		Network: virt.Network{Kind: "user"}, Hostname: "vmtest",
		Kernel: &virt.KernelBoot{Kernel: guest.Kernel, Initrd: guest.Initrd, Cmdline: "console=ttyS0 panic=-1"},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("vmtest-%d", time.Now().UnixNano()%1e9)
	in := instance(id, "tenant-vm", 0)
	in.Spec.VCPUs, in.Spec.MemoryMiB = 1, 256
	in.GPU.Endpoints = []string{"10.0.2.2:" + fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)}
	cp.Put(in)
	defer hv.Undefine(virt.DomainName(id))

	created := time.Now()
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	provisioned := time.Since(created) // overlay, seed ISO, define, start
	if o, _ := cp.Observed(id); o.State != api.ObservedRunning {
		t.Fatalf("observed %+v", o)
	}
	console := r.paths(id).console
	var firstLine time.Duration
	var got string
	for got == "" {
		if firstLine == 0 {
			if b, _ := os.ReadFile(console); strings.Contains(string(b), "\n") {
				firstLine = time.Since(created)
			}
		}
		select {
		case got = <-hello:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			b, _ := os.ReadFile(console)
			t.Fatalf("guest never called: %v\nconsole:\n%s", ctx.Err(), b)
		}
	}
	reached := time.Since(created)
	if want := "hello " + id + " tok-" + id; got != want {
		t.Fatalf("guest said %q, want %q", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(console)
		if strings.Contains(string(b), "gpucloud-vmtest: seed instance="+id+" tier=shared") &&
			strings.Contains(string(b), "gpucloud-vmtest: reached 10.0.2.2:") {
			t.Logf("console (last 1 KiB):\n%s", b[max(0, len(b)-1024):])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console lacks the guest's lines:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("real VM (QEMU TCG via libvirt): hostd pass (overlay+seed+define+start) %v, create -> first console line %v, create -> guest reached host endpoint %v\n",
		provisioned.Round(time.Millisecond), firstLine.Round(time.Millisecond), reached.Round(time.Millisecond))

	cp.SetDesired(id, api.DesiredDeleted)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := hv.XML(virt.DomainName(id)); err == nil {
		t.Fatal("domain still defined after delete")
	}
	if _, err := os.Stat(r.paths(id).dir); !os.IsNotExist(err) {
		t.Fatalf("instance files left: %v", err)
	}
}

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test")
		}
		dir = parent
	}
}

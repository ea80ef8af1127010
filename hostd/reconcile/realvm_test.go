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
	"syscall"
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
	ctx, hv, guest, dir, images := realVMSetup(t)

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

// realVMSetup is what a real-VM test needs: root, QEMU, a running libvirtd, the guest kernel and
// initramfs, a qemu:///system connection and a base image. The context ends after 3 minutes.
func realVMSetup(t *testing.T) (ctx context.Context, hv *virt.Hypervisor, guest vmtest.Guest, dir, images string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it starts libvirtd and uses qemu:///system")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	vmtest.LockSystemLibvirt(t) // before the clock starts: another package's real-VM test may hold it
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := vmtest.EnsureLibvirtd(ctx); err != nil {
		t.Fatal(err)
	}
	var err error
	guest, err = vmtest.BuildGuest(ctx, filepath.Join(repoRoot(t), ".data", "vmtest"))
	if err != nil {
		t.Fatal(err)
	}

	hv, err = virt.Open("qemu:///system", "qemu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	dir = t.TempDir()
	// Where qemu.conf runs QEMU as libvirt-qemu, it must be able to walk to the VM's files.
	os.Chmod(dir, 0o711)
	os.Chmod(filepath.Dir(dir), 0o711)
	images = filepath.Join(dir, "images")
	os.MkdirAll(images, 0o755)
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(images, "base.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	return ctx, hv, guest, dir, images
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

// TestRealVMGetsItsIvshmemChannel defines and starts a GPU instance of the local gpuserverd
// through libvirt (qemu:///system): libvirt accepts the shmem device, QEMU maps the file hostd
// made in /dev/shm (not one of its own), and deleting the instance removes the file.
func TestRealVMGetsItsIvshmemChannel(t *testing.T) {
	ctx, hv, guest, dir, images := realVMSetup(t)
	cp := cpfake.New(t, "host-secret")
	r, err := New(Config{
		ControlPlane: cp.Client(t), Hypervisor: hv, DataDir: filepath.Join(dir, "data"), ImagesDir: images,
		Network: virt.Network{Kind: "user"}, Hostname: "vmtest",
		Kernel:  &virt.KernelBoot{Kernel: guest.Kernel, Initrd: guest.Initrd, Cmdline: "console=ttyS0 panic=-1"},
		Ivshmem: &IvshmemConfig{GPUServerID: "gs1", Dir: "/dev/shm", Bytes: 16 << 20, GID: -1},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("vmtest-shm-%d", time.Now().UnixNano()%1e9)
	in := instance(id, "tenant-vm", 0)
	in.Spec.VCPUs, in.Spec.MemoryMiB = 1, 256
	cp.Put(in)
	defer hv.Undefine(virt.DomainName(id))
	path := "/dev/shm/gpucloud-" + id
	defer os.Remove(path)
	before, err := os.Stat(path)
	if err == nil {
		t.Fatalf("channel file exists before the instance: %v", before.Mode())
	}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if o, _ := cp.Observed(id); o.State != api.ObservedRunning {
		t.Fatalf("observed %+v", o)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 16<<20 {
		t.Fatalf("channel file: %v %v", fi, err)
	}
	pidb, err := os.ReadFile("/run/libvirt/qemu/" + virt.DomainName(id) + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pidb)) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprint(fi.Sys().(*syscall.Stat_t).Ino)
	mapped := false
	for _, l := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(l); len(f) >= 6 && f[5] == path && f[4] == ino {
			mapped = true
		}
	}
	if !mapped {
		t.Fatalf("QEMU has not mapped hostd's %s (inode %s)", path, ino)
	}
	cp.SetDesired(id, api.DesiredDeleted)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("channel file after delete: %v", err)
	}
}

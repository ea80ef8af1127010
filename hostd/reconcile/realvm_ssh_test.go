package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"gpucloud/api"
	"gpucloud/hostd/controlplane/cpfake"
	"gpucloud/hostd/virt"
	"gpucloud/hostd/vmtest"
	"gpucloud/internal/sshtest"
)

// TestRealVMSSHThroughForwardedPort boots a real guest (QEMU TCG through libvirt) whose seed
// carries a tenant's SSH key and a user-data script, and logs in over SSH through the host port
// hostd forwarded (user-mode networking, bound to 127.0.0.1): the user-data has run, the key is
// accepted, another key is refused. The guest is vmtest's busybox appliance with minisshd (a test
// SSH server) instead of an image built by deploy/guest-image, which is too heavy for CI here.
func TestRealVMSSHThroughForwardedPort(t *testing.T) {
	ctx, hv, cfg0, _ := sshGuestHost(t)
	tenantKey, stranger := sshtest.New(t, "tenant@test"), sshtest.New(t, "stranger@test")
	port := freePort(t)
	cp := cpfake.New(t, "host-secret")
	cfg0.ControlPlane, cfg0.Ports = cp.Client(t), PortRange{First: port, Last: port}
	r, err := New(cfg0)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("vmssh-%d", time.Now().UnixNano()%1e9)
	in := instance(id, "tenant-ssh", 0)
	in.Spec.VCPUs, in.Spec.MemoryMiB = 1, 256
	in.Spec.SSHKeys = []string{tenantKey.Line}
	in.Spec.UserData = "#!/bin/sh\necho \"user-data ran on $(hostname)\" > /tmp/marker\n"
	cp.Put(in)
	defer hv.Undefine(virt.DomainName(id))

	created := time.Now()
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	o, _ := cp.Observed(id)
	if o.State != api.ObservedRunning || len(o.Forwards) != 1 || o.Forwards[0] != (api.PortForward{GuestPort: 22, HostPort: port}) || o.PublicHost != "127.0.0.1" {
		t.Fatalf("observed %+v", o)
	}
	addr := net.JoinHostPort(o.PublicHost, fmt.Sprint(o.Forwards[0].HostPort))
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(tenantKey.Signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second} // the appliance makes a fresh host key each boot
	var client *ssh.Client
	for client == nil {
		if client, err = ssh.Dial("tcp", addr, cfg); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(r.paths(id).console)
			t.Fatalf("no SSH login through %s: %v\nconsole:\n%s", addr, err, b)
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer client.Close()
	loggedIn := time.Since(created)
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output("cat /tmp/marker")
	if err != nil || strings.TrimSpace(string(out)) != "user-data ran on "+id {
		t.Fatalf("user-data's effect: %q %v", out, err)
	}
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(stranger.Signer)}
	if c, err := ssh.Dial("tcp", addr, cfg); err == nil {
		c.Close()
		t.Fatal("a key the tenant never gave was accepted")
	}
	fmt.Printf("real VM (QEMU TCG via libvirt): create -> SSH login through the forwarded port %v\n", loggedIn.Round(time.Millisecond))

	cp.SetDesired(id, api.DesiredDeleted)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the forwarded port still answers after the VM was deleted")
	}
}

// sshGuestHost boots nothing yet: it readies a real libvirt host and the SSH appliance guest,
// and returns a hostd Config for it (user networking forwarded on 127.0.0.1, direct kernel
// boot) that a test completes with its control plane and ports.
func sshGuestHost(t *testing.T) (context.Context, *virt.Hypervisor, Config, string) {
	ctx, hv, guest, dir, images := realVMSetup(t)
	gdir := filepath.Join(dir, "guest")
	os.MkdirAll(gdir, 0o755)
	sshGuest, err := vmtest.BuildSSHGuest(ctx, guest, repoRoot(t), gdir)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, hv, Config{
		Hypervisor: hv, DataDir: filepath.Join(dir, "data"), ImagesDir: images,
		Network: virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}, Hostname: "vmtest", PublicHost: "127.0.0.1",
		Kernel: &virt.KernelBoot{Kernel: sshGuest.Kernel, Initrd: sshGuest.Initrd, Cmdline: "console=ttyS0 panic=-1"},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, dir
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

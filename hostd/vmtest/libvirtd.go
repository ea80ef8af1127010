package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"libvirt.org/go/libvirt"
)

// EnsureLibvirtd starts virtlogd and libvirtd as daemons (-d) unless qemu:///system already
// answers. Machines without systemd (containers, CI) have nothing else to start them.
//
// Debian's libvirt resolves its default QEMU user, libvirt-qemu, before it reads qemu.conf, and
// only the libvirt-daemon-system package creates that user; without it the QEMU driver does not
// load. So where the user is missing it is created as a system user (as that package would), and
// where no qemu.conf exists one is written that runs QEMU as root: the test's files live in
// private temp dirs that a QEMU running as libvirt-qemu could not open.
func EnsureLibvirtd(ctx context.Context) error {
	if ping() == nil {
		return nil
	}
	for _, d := range []string{"/var/log/libvirt", "/var/run/libvirt", "/var/lib/libvirt"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("vmtest: %w", err)
		}
	}
	if exec.Command("getent", "passwd", "libvirt-qemu").Run() != nil {
		if out, err := exec.CommandContext(ctx, "useradd", "--system", "--no-create-home", "--home-dir", "/var/lib/libvirt",
			"--shell", "/usr/sbin/nologin", "libvirt-qemu").CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: create user libvirt-qemu: %w: %s", err, out)
		}
	}
	if _, err := os.Stat("/etc/libvirt/qemu.conf"); os.IsNotExist(err) {
		conf := "# Written by gpucloud's hostd VM test (hostd/vmtest): QEMU runs as root on this test machine.\nuser = \"root\"\ngroup = \"root\"\n"
		if err := os.WriteFile("/etc/libvirt/qemu.conf", []byte(conf), 0o644); err != nil {
			return fmt.Errorf("vmtest: write qemu.conf: %w", err)
		}
	}
	if !pidAlive("/var/run/virtlogd.pid") {
		if out, err := exec.CommandContext(ctx, "virtlogd", "-d").CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: virtlogd -d: %w: %s", err, out)
		}
	}
	if !pidAlive("/var/run/libvirtd.pid") {
		if out, err := exec.CommandContext(ctx, "libvirtd", "-d").CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: libvirtd -d: %w: %s", err, out)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vmtest: libvirtd does not answer on qemu:///system: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ping() error {
	c, err := libvirt.NewConnect("qemu:///system")
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

func pidAlive(pidfile string) bool {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

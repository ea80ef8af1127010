package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// sshInitScript replaces the guest's init for the SSH appliance: it runs the tenant's user-data
// script from the seed (as cloud-init would run a "#!" part), then serves SSH with the seed's
// authorized keys (minisshd) and stays up.
const sshInitScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /seed /tmp /sbin /usr/bin /usr/sbin /root /mnt
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "gpucloud-vmtest: init started (ssh appliance)"
for m in $(cat /modules); do insmod "$m" || echo "gpucloud-vmtest: insmod $m failed"; done
i=0
while [ ! -b /dev/sr0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if ! mount -t iso9660 -o ro /dev/sr0 /seed; then echo "gpucloud-vmtest: no seed cdrom"; poweroff -f; fi
. /seed/gpucloud/guest.conf
hostname "$GPUCLOUD_INSTANCE_ID"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
if [ -f /seed/gpucloud/user-data ] && [ "$(head -c 2 /seed/gpucloud/user-data)" = "#!" ]; then
  cp /seed/gpucloud/user-data /tmp/user-data && chmod 0755 /tmp/user-data
  /tmp/user-data > /tmp/user-data.log 2>&1
  echo "gpucloud-vmtest: user-data exited $?"
fi
/bin/minisshd -authorized-keys /seed/gpucloud/authorized_keys -listen :22 &
echo "gpucloud-vmtest: sshd started"
while true; do sleep 3600; done
`

// BuildSSHGuest returns g with an initramfs that serves SSH: g's archive with a second one
// appended (the kernel unpacks both; later files win) holding sshInitScript as /init and the
// minisshd test appliance, built here from hostd/vmtest/minisshd. repo is the repository root.
func BuildSSHGuest(ctx context.Context, g Guest, repo, dir string) (Guest, error) {
	bin := filepath.Join(dir, "minisshd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hostd/vmtest/minisshd")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return g, fmt.Errorf("vmtest: build minisshd: %w: %s", err, out)
	}
	overlay := filepath.Join(dir, "ssh-overlay.gz")
	if err := writeInitramfs(overlay, []cpioFile{
		{name: "init", data: []byte(sshInitScript), mode: 0o755},
		{name: "bin/minisshd", src: bin, mode: 0o755},
	}); err != nil {
		return g, err
	}
	base, err := os.ReadFile(g.Initrd)
	if err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	extra, err := os.ReadFile(overlay)
	if err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	out := Guest{Kernel: g.Kernel, Initrd: filepath.Join(dir, "initrd-ssh.gz")}
	if err := os.WriteFile(out.Initrd, append(base, extra...), 0o644); err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	return out, nil
}

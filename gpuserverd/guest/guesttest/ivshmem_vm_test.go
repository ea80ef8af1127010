package guesttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/hostd/vmtest"
)

// vmInit is the VM's whole userland: find the ivshmem device, run the CUDA program through it.
const vmInit = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for d in /sys/bus/pci/devices/*; do echo "ivshmem-vm: pci $(basename $d) $(cat $d/vendor):$(cat $d/device)"; done
GPUCLOUD_TRACE=1 /vecadd
echo "ivshmem-vm: vecadd exit $?"
poweroff -f
`

// staticVecadd builds tests/vecadd.c with the guest library linked in statically: the VM's
// initramfs has no C library to load a libcuda.so.1 with.
func staticVecadd(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "vecadd-static")
	srcs, _ := filepath.Glob("../*.c")
	args := append([]string{"-static", "-O2", "-std=gnu11", "-pthread", "-I..", "-I../include", "-o", out, "../tests/vecadd.c"}, srcs...)
	if b, err := exec.Command("gcc", append(args, "-ldl")...).CombinedOutput(); err != nil {
		t.Fatalf("static vecadd: %v\n%s", err, b)
	}
	return out
}

// TestIvshmemRealVM boots a VM (QEMU, TCG) with an ivshmem-plain device backed by the channel
// file gpuserverd serves; inside, a static CUDA program finds the device through sysfs
// (ivshmem:auto, BAR 2's resource2) and runs a vector add through the guest library.
func TestIvshmemRealVM(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	if testing.Short() {
		t.Skip("boots a VM (tens of seconds under TCG)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, _ := filepath.Abs("../../..")
	guest, err := vmtest.BuildGuest(ctx, filepath.Join(root, ".data", "vmtest"))
	if err != nil {
		t.Fatal(err)
	}
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm")
	waitFree(t, path, 0)
	work := t.TempDir()
	token := s.token("vm", "shared", 1<<30)
	conf := fmt.Sprintf("endpoint=ivshmem:auto\ntoken=%s\n", token)
	bin, err := os.ReadFile(staticVecadd(t, work))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guest.WithOverlay(filepath.Join(work, "initrd.gz"),
		vmtest.File{Name: "init", Data: []byte(vmInit), Mode: 0o755},
		vmtest.File{Name: "vecadd", Data: bin, Mode: 0o755},
		vmtest.File{Name: "etc/gpucloud/guest.conf", Data: []byte(conf), Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, qemu, "-machine", "q35,accel=tcg", "-m", "256", "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot", "-nic", "none",
		"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", "console=ttyS0 panic=-1 quiet",
		"-object", "memory-backend-file,id=gpucloud,size=16M,share=on,mem-path="+path,
		"-device", "ivshmem-plain,memdev=gpucloud")
	var console bytes.Buffer
	cmd.Stdout, cmd.Stderr = &console, &console
	start := time.Now()
	err = cmd.Run()
	t.Logf("VM ran %.1f s", time.Since(start).Seconds())
	out := console.String()
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, tail(out))
	}
	for _, want := range []string{"1af4:0x1110", "ivshmem channel /sys/bus/pci/devices/", "shared arena: 16777216 bytes",
		"send MemcpyHtoDShm", "VECADD OK 1048576", "ivshmem-vm: vecadd exit 0"} {
		if !strings.Contains(out, want) {
			t.Fatalf("console lacks %q:\n%s", want, tail(out))
		}
	}
	waitFor(t, "the VM session's usage record", func() bool {
		recs := s.usage()
		return len(recs) == 1 && recs[0].InstanceID == "inst-vm"
	})
}

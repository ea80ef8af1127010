package guesttest

import (
	"bytes"
	"context"
	"fmt"
	"gpucloud/api"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/hostd/vmtest"
)

// vmInit is the VM's whole userland: find the ivshmem device, run two CUDA programs through it at
// once (one per slot), one of them moving registered memory into its slot of the BAR. Inside a VM
// a registered range's pages are a mapping of the BAR, which userfaultfd cannot write-protect, so
// reg_test does not check for writes held while they move back (README, "Zero-copy in VMs").
const vmInit = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for d in /sys/bus/pci/devices/*; do echo "ivshmem-vm: pci $(basename $d) $(cat $d/vendor):$(cat $d/device)"; done
GPUCLOUD_TRACE=1 GPUCLOUD_DEBUG=1 REGTEST_NO_WRITERS=1 /reg_test ivshmem > /tmp/reg.out 2>&1 &
reg=$!
GPUCLOUD_TRACE=1 /vecadd
echo "ivshmem-vm: vecadd exit $?"
wait $reg
echo "ivshmem-vm: reg_test exit $?"
cat /tmp/reg.out
` + loaderVMInit + `poweroff -f
`

// staticProg builds tests/<name>.c with the guest library linked in statically: the VM's
// initramfs has no C library to load a libcuda.so.1 with.
func staticProg(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name+"-static")
	srcs, _ := filepath.Glob("../*.c")
	for _, layer := range []string{"../transport/*.c", "../driver/*.c"} {
		more, _ := filepath.Glob(layer)
		srcs = append(srcs, more...)
	}
	args := append([]string{"-static", "-O2", "-std=gnu11", "-pthread", "-I..", "-I../include", "-I../tests", "-o", out, "../tests/" + name + ".c"}, srcs...)
	if b, err := exec.Command("gcc", append(args, "-ldl")...).CombinedOutput(); err != nil {
		t.Fatalf("static %s: %v\n%s", name, err, b)
	}
	return out
}

// TestIvshmemRealVM boots a VM (QEMU, TCG) with an ivshmem-plain device backed by the channel
// file gpuserverd serves, split into two slots; inside, two static CUDA programs at once find the
// device through sysfs (ivshmem:auto, BAR 2's resource2): a vector add, and reg_test, whose
// registered ranges move into its slot of the BAR and are copied as one DMA each.
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
	s, dir := startIvshmemServer(t, "--ivshmem-slots", "2")
	path := channelFileOf(t, dir, "inst-vm", 64<<20) // two slots of 32 MiB, as reg_test's arena
	work := t.TempDir()
	token := s.token("vm", "shared", 1<<30)
	conf := fmt.Sprintf("endpoint=ivshmem:auto\ntoken=%s\n", token)
	waitFor(t, "two free slots", func() bool {
		a, _ := slotState(t, path, 0, 32<<20)
		b, _ := slotState(t, path, 1, 32<<20)
		return a == ivshmem.StateFree && b == ivshmem.StateFree
	})
	bin, err := os.ReadFile(staticProg(t, work, "vecadd"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := os.ReadFile(staticProg(t, work, "reg_test"))
	if err != nil {
		t.Fatal(err)
	}
	files := append(loaderVMFiles(t, work),
		vmtest.File{Name: "init", Data: []byte(vmInit), Mode: 0o755},
		vmtest.File{Name: "vecadd", Data: bin, Mode: 0o755},
		vmtest.File{Name: "reg_test", Data: reg, Mode: 0o755},
		vmtest.File{Name: "etc/gpucloud/guest.conf", Data: []byte(conf), Mode: 0o600})
	g, err := guest.WithOverlay(filepath.Join(work, "initrd.gz"), files...)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, qemu, "-machine", "q35,accel=tcg", "-m", "256", "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot", "-nic", "none",
		"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", "console=ttyS0 panic=-1 quiet",
		"-object", "memory-backend-file,id=gpucloud,size=64M,share=on,mem-path="+path,
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
	for _, want := range []string{"1af4:0x1110", "ivshmem channel /sys/bus/pci/devices/", "shared arena: 33554432 bytes",
		"slot 0 of 2", "slot 1 of 2", "send MemcpyHtoDShm", "VECADD OK 1048576", "ivshmem-vm: vecadd exit 0",
		"ivshmem-vm: reg_test exit 0", "REGTEST writers not checked", loaderVMWants[0], loaderVMWants[1]} {
		if !strings.Contains(out, want) {
			t.Fatalf("console lacks %q:\n%s", want, tail(out))
		}
	}
	_, reglog, _ := strings.Cut(out, "ivshmem-vm: reg_test exit 0")
	checkRegTrace(t, reglog, true)
	var recs []api.UsageRecord
	defer func() {
		if t.Failed() {
			t.Logf("usage records: %+v", recs)
		}
	}()
	// Three sessions (vecadd, reg_test, rpath_probe through gpucloud's runtime), all billed to the
	// VM's instance. A checkpoint tick (every 10 s) may cut a
	// session in two records, the second starting where the first ended: count the sessions' last
	// records, those no other record continues.
	waitFor(t, "the VM sessions' usage records", func() bool {
		recs = s.usage()
		starts := map[time.Time]bool{}
		for _, r := range recs {
			if r.InstanceID != "inst-vm" {
				return false
			}
			starts[r.Start] = true
		}
		last := 0
		for _, r := range recs {
			if !starts[r.End] {
				last++
			}
		}
		return last == 3
	})
}

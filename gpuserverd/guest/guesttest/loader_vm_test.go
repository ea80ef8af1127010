package guesttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/hostd/vmtest"
)

// The loader's part of the real-VM test: rpath_probe, whose DT_RPATH names a folder standing for
// a wheel's nvidia/cu13/lib with a decoy libcudart.so.13 in it, run inside the VM under the
// image's auditor (it must get gpucloud's runtime and reach the GPU through it, over the ivshmem
// channel) and opted out (it must get the decoy). The VM's busybox userland has no C library, so
// glibc's loader and libc come along.
const (
	vmWheelLib = "/opt/wheel/nvidia/cu13/lib"
	vmLibDir   = "/usr/lib/gpucloud"
	vmAudit    = vmLibDir + "/libgpucloud-audit.so"
)

// loaderVMInit is run by the VM's init once the other programs have ended (their slots are
// freed by gpuserverd meanwhile: the sleep).
const loaderVMInit = `sleep 3
echo "ivshmem-vm: audited $(PROBE_DEVICES=1 LD_AUDIT=` + vmAudit + ` /rpath_probe 2>&1 | tr '\n' ' ')"
echo "ivshmem-vm: opted out $(GPUCLOUD_NATIVE=1 LD_AUDIT=` + vmAudit + ` /rpath_probe 2>&1 | tr '\n' ' ')"
`

// loaderVMFiles builds what loaderVMInit runs and returns it as files of the VM's initramfs.
func loaderVMFiles(t *testing.T, work string) []vmtest.File {
	t.Helper()
	ours := buildCudart(t)
	decoy := filepath.Join(work, "decoy", "libcudart.so.13")
	probe := filepath.Join(work, "rpath_probe")
	os.MkdirAll(filepath.Dir(decoy), 0o755)
	for _, s := range [][]string{
		{"make", "-s", "-C", "../loader", "BUILD=" + work, "WERROR=-Werror"},
		{"gcc", "-Wall", "-Werror", "-fPIC", "-shared", "-Wl,-soname,libcudart.so.13", "-o", decoy, "../loader/testdata/decoy_cudart.c"},
		rpathProbe(probe, vmWheelLib, decoy),
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	var files []vmtest.File
	add := func(name, from string) {
		data, err := os.ReadFile(from) // follows links: the loader and libc are links on the host
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, vmtest.File{Name: strings.TrimPrefix(name, "/"), Data: data, Mode: 0o755})
	}
	// The loader where the kernel finds it (PT_INTERP) and where libc's DT_NEEDED finds it (an
	// auditor's namespace loads libc's dependencies by search, as Debian's layout has them).
	add("/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")
	add("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")
	add("/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
	add(vmAudit, filepath.Join(work, "libgpucloud-audit.so"))
	add(vmLibDir+"/libcudart.so.13", filepath.Join(ours, "libcudart.so.13"))
	add(vmLibDir+"/libcuda.so.1", filepath.Join(ours, "libcuda.so.1"))
	add(vmWheelLib+"/libcudart.so.13", decoy)
	add("/rpath_probe", probe)
	return files
}

// loaderVMWants are the console lines loaderVMInit must print: under the auditor gpucloud's
// runtime answered, and through it the session's one GPU; opted out, the decoy.
var loaderVMWants = []string{
	"ivshmem-vm: audited needed: version 13000 from " + vmLibDir + "/libcudart.so.13 devices: 1 (rc 0)",
	"ivshmem-vm: opted out decoy needed: version -1 from " + vmWheelLib + "/libcudart.so.13",
}

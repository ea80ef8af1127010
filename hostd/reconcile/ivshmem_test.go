package reconcile

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"libvirt.org/go/libvirtxml"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// A GPU instance of the local gpuserverd gets its own ivshmem channel: the file exists with its
// mode, group and size before the domain is defined, the domain carries the device, and the file
// goes with the instance. Instances of other GPU servers get none.
func TestIvshmemChannelLifecycle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	dir := t.TempDir()
	e.shm = &IvshmemConfig{GPUServerID: "gs1", Dir: dir, Bytes: 32 << 20, GID: os.Getgid()}
	h := e.hostd()
	local, remote := instance("g1", "tenantA", 0), instance("g2", "tenantB", 0)
	remote.GPU.GPUServerID = "gs-elsewhere"
	e.cp.Put(local)
	e.cp.Put(remote)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpucloud-g1")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || fi.Size() != 32<<20 || int(st.Gid) != os.Getgid() {
		t.Fatalf("channel file mode %v size %d gid %d", fi.Mode(), fi.Size(), st.Gid)
	}
	shmems := func(id string) []libvirtxml.DomainShmem {
		x, err := e.hv.XML(virt.DomainName(id))
		if err != nil {
			t.Fatal(err)
		}
		var dx libvirtxml.Domain
		if err := dx.Unmarshal(x); err != nil {
			t.Fatal(err)
		}
		return dx.Devices.Shmems
	}
	if sm := shmems("g1"); len(sm) != 1 || sm[0].Name != "gpucloud-g1" || sm[0].Model == nil || sm[0].Model.Type != "ivshmem-plain" ||
		sm[0].Size == nil || uint64(sm[0].Size.Value)<<unitShift(sm[0].Size.Unit) != 32<<20 {
		t.Fatalf("g1's shmem devices %+v", sm)
	}
	for id, want := range map[string]string{"g1": "GPUCLOUD_ENDPOINTS=ivshmem:auto,10.1.0.1:7000\n", "g2": "GPUCLOUD_ENDPOINTS=10.1.0.1:7000\n"} {
		if _, err := exec.LookPath("isoinfo"); err != nil {
			break
		}
		conf, err := exec.Command("isoinfo", "-i", h.paths(id).seed, "-R", "-x", "/gpucloud/guest.conf").Output()
		if err != nil || !strings.Contains(string(conf), want) {
			t.Fatalf("%s's guest.conf lacks %q: %v\n%s", id, want, err, conf)
		}
	}
	if sm := shmems("g2"); len(sm) != 0 {
		t.Fatalf("an instance of another GPU server got a channel: %+v", sm)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("channel files %v, want g1's alone", entries)
	}
	// A leftover of an instance hostd no longer knows is removed; the live one stays, and so
	// does what is not a channel file (another program's directory with the prefix).
	os.WriteFile(filepath.Join(dir, "gpucloud-gone"), nil, 0o600)
	notOurs := filepath.Join(dir, "gpucloud-test-123")
	os.MkdirAll(filepath.Join(notOurs, "inside"), 0o700)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(notOurs, "inside")); err != nil {
		t.Fatalf("hostd touched a directory that is no channel: %v", err)
	}
	os.RemoveAll(notOurs)
	if _, err := os.Stat(filepath.Join(dir, "gpucloud-gone")); !os.IsNotExist(err) {
		t.Fatalf("leftover channel: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the live channel went: %v", err)
	}
	e.cp.SetDesired("g1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("channel after delete: %v", err)
	}
}

func unitShift(u string) uint {
	switch strings.ToLower(u) {
	case "kib", "k":
		return 10
	case "mib", "m":
		return 20
	}
	return 0
}

// A symlink planted where the channel goes is not followed: provisioning fails and leaves the
// target alone.
func TestIvshmemChannelRefusesASymlink(t *testing.T) {
	e := newEnv(t, 0)
	dir := t.TempDir()
	e.shm = &IvshmemConfig{GPUServerID: "gs1", Dir: dir, Bytes: 16 << 20, GID: -1}
	target := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(target, []byte("keep"), 0o644)
	os.Symlink(target, filepath.Join(dir, "gpucloud-s1"))
	e.cp.Put(instance("s1", "tenantA", 0))
	e.hostd().Once(context.Background())
	if o := e.observed("s1"); o.State != api.ObservedFailed || !strings.Contains(o.Reason, "ivshmem channel") {
		t.Fatalf("observed %+v", o)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("symlink target changed: %q", b)
	}
	if _, ok := e.domains()["s1"]; ok {
		t.Fatal("domain defined without its channel")
	}
}

func TestIvshmemConfigChecked(t *testing.T) {
	for _, c := range []IvshmemConfig{{Dir: "/dev/shm", Bytes: 16 << 20}, {GPUServerID: "gs", Dir: "/dev/shm", Bytes: 24 << 20}} {
		if err := c.validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

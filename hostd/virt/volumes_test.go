package virt_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gpucloud/hostd/virt"
)

// On libvirt's test driver: hostd's pool is made once, volumes are created thin and kept, a
// volume disk is added to a stopped domain's definition and hotplugged into a running one (the
// guest sees its id as the serial), removed again, and deleting a volume twice is no error.
func TestVolumesInPoolAndDomain(t *testing.T) {
	h, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dir := t.TempDir()
	pool := "gpucloud-vol-test-" + filepath.Base(dir)
	for range 2 {
		if err := h.EnsurePool(pool, filepath.Join(dir, "volumes")); err != nil {
			t.Fatal(err)
		}
	}
	path, err := h.EnsureVolume(pool, "vol-1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := h.EnsureVolume(pool, "vol-1", 20); err != nil || again != path {
		t.Fatalf("ensure again: %q %v, want %q", again, err, path)
	}
	if _, err := h.EnsureVolume(pool, "../x", 1); err == nil {
		t.Fatal("a volume id with '/' was accepted")
	}
	if ids, err := h.Volumes(pool); err != nil || !slices.Equal(ids, []string{"vol-1"}) {
		t.Fatalf("volumes %v %v", ids, err)
	}

	s := spec(t.TempDir(), "voldom-"+filepath.Base(dir))
	s.VFPCIAddress = ""
	if err := h.Define(s); err != nil {
		t.Fatal(err)
	}
	name := virt.DomainName(s.Meta.InstanceID)
	defer h.Undefine(name)
	disk := virt.VolumeDisk{ID: "vol-1", Path: path, Device: "vdb"}
	if _, err := h.AttachVolume(name, disk, false); err != nil {
		t.Fatal(err)
	}
	got, err := h.VolumeDisks(name)
	if err != nil || len(got) != 1 || got[0] != disk {
		t.Fatalf("volume disks %+v %v, want %+v", got, err, disk)
	}
	x, _ := h.InactiveXML(name)
	if !strings.Contains(x, "<serial>vol-1</serial>") {
		t.Fatalf("no serial in %s", x)
	}
	if _, err := h.AttachVolume(name, virt.VolumeDisk{ID: "vol-2", Path: path, Device: "vda"}, false); err == nil {
		t.Fatal("a volume on vda (the root disk) was accepted")
	}
	if err := h.Start(name); err != nil {
		t.Fatal(err)
	}
	// The test driver cannot hotplug: the definition changes and the running domain does not.
	if plugged, err := h.DetachVolume(name, disk, true); err != nil || plugged {
		t.Fatalf("detach from a running test domain: %v %v", plugged, err)
	}
	if got, _ := h.VolumeDisks(name); len(got) != 0 {
		t.Fatalf("after detach %+v", got)
	}
	if _, err := h.AttachVolume(name, disk, true); err != nil {
		t.Fatalf("attach to a running domain: %v", err)
	}
	if got, _ := h.VolumeDisks(name); len(got) != 1 {
		t.Fatalf("after attach to the running domain %+v", got)
	}
	h.Destroy(name)
	for range 2 {
		if err := h.DeleteVolume(pool, "vol-1"); err != nil {
			t.Fatal(err)
		}
	}
	if ids, _ := h.Volumes(pool); len(ids) != 0 {
		t.Fatalf("after delete %v", ids)
	}
}

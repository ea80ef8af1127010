package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// Volumes through the control loop on the test driver: created in the host's pool when placed,
// given to a running VM as its device (in the definition: the test driver cannot hotplug),
// moved to another VM, kept when its VM is deleted, and deleted only when the apiserver drops it.
func TestVolumesFollowTheControlPlane(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	h := e.hostd()
	pass := func() {
		t.Helper()
		if err := h.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	disks := func(id string) []virt.VolumeDisk {
		t.Helper()
		got, err := e.hv.VolumeDisks(virt.DomainName(id))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	vm1, vm2 := instance("v1", "tenantA", 0x11), instance("v2", "tenantA", 0x11)
	vm1.Spec.Volumes = []api.VolumeAttachment{{ID: "vol-a", Device: "vdb"}}
	e.cp.SetVolumes([]api.DesiredVolume{{ID: "vol-a", SizeGiB: 2}, {ID: "vol-b", SizeGiB: 1}})
	e.cp.Put(vm1)
	e.cp.Put(vm2)
	pass()
	if ids, _ := e.hv.Volumes("gpucloud-volumes"); !slices.Equal(ids, []string{"vol-a", "vol-b"}) {
		t.Fatalf("pool volumes %v", ids)
	}
	if d := disks("v1"); len(d) != 1 || d[0].ID != "vol-a" || d[0].Device != "vdb" {
		t.Fatalf("v1 volume disks %+v", d)
	}
	if o := e.observed("v1"); o.State != api.ObservedRunning {
		t.Fatalf("v1 %+v", o)
	}
	pass() // converged: nothing changes
	if d := disks("v1"); len(d) != 1 {
		t.Fatalf("v1 after a second pass %+v", d)
	}

	// Detached from v1 and attached to v2 (as its vdc); vol-b to v1.
	vm1.Spec.Volumes = []api.VolumeAttachment{{ID: "vol-b", Device: "vdb"}}
	vm2.Spec.Volumes = []api.VolumeAttachment{{ID: "vol-a", Device: "vdc"}}
	e.cp.Put(vm1)
	e.cp.Put(vm2)
	pass()
	if d := disks("v1"); len(d) != 1 || d[0].ID != "vol-b" {
		t.Fatalf("v1 volume disks %+v", d)
	}
	if d := disks("v2"); len(d) != 1 || d[0].ID != "vol-a" || d[0].Device != "vdc" {
		t.Fatalf("v2 volume disks %+v", d)
	}

	// v2 deleted: its volume stays in the pool; vol-b deleted by its tenant after a detach.
	vm2.DesiredState = api.DesiredDeleted
	vm2.Spec.Volumes = nil
	vm1.Spec.Volumes = nil
	e.cp.Put(vm1)
	e.cp.Put(vm2)
	e.cp.SetVolumes([]api.DesiredVolume{{ID: "vol-a", SizeGiB: 2}})
	pass()
	if ids, _ := e.hv.Volumes("gpucloud-volumes"); !slices.Equal(ids, []string{"vol-a"}) {
		t.Fatalf("pool after deletes %v", ids)
	}
	if d := disks("v1"); len(d) != 0 {
		t.Fatalf("v1 keeps %+v", d)
	}

	// An attachment to a volume the host does not keep is an error of the pass, naming it; the
	// VM is not failed for it.
	vm1.Spec.Volumes = []api.VolumeAttachment{{ID: "vol-x", Device: "vdb"}}
	e.cp.Put(vm1)
	if err := h.Once(ctx); err == nil || !strings.Contains(err.Error(), "vol-x") {
		t.Fatalf("an unknown volume: %v", err)
	}
	if o := e.observed("v1"); o.State != api.ObservedRunning {
		t.Fatalf("v1 with an unknown volume %+v", o)
	}
}

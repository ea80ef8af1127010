package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

// Volumes: created within the tenant's volume quotas, attached to one instance at a time on
// their host, handed to the host as a disk of the VM, detached (not deleted) when their instance
// is deleted, reattached elsewhere on the host; another tenant can neither see nor use them;
// storage is held in billing from create to delete.
func TestVolumes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	clock := &testClock{now: t0}
	e.st.SetClock(clock.Now)
	hostKey := e.host("h1", 32, 65536)
	report := func(id uuid.UUID, state string) {
		t.Helper()
		e.must(204, "PUT", "/v1/agent/host/instances/"+id.String()+"/status", hostKey, api.InstanceObserved{State: state}, nil)
	}

	// Bad input names the field; quotas name the one exceeded.
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"name": "", "size_gib": 1}, "name"},
		{map[string]any{"name": "d", "size_gib": 0}, "size_gib"},
		{map[string]any{"name": "d", "size_gib": 16385}, "size_gib"},
	} {
		status, _, body := e.call("POST", "/v1/volumes", e.tenantA.Key, c.body, nil)
		if status != 400 || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
			t.Errorf("%v: %d %s", c.body, status, body)
		}
	}
	v5 := 5
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 10, "gpus": 10,
		"gpu_memory_bytes": 1 << 40, "volumes": 2, "volume_gib": 15}, nil)
	status, _, body := e.call("POST", "/v1/volumes", e.tenantA.Key, map[string]any{"name": "huge", "size_gib": 16}, nil)
	if status != 403 || !strings.Contains(string(body), "volume_gib quota exceeded") {
		t.Fatalf("over volume_gib: %d %s", status, body)
	}
	var data, scratch store.Volume
	e.must(201, "POST", "/v1/volumes", e.tenantA.Key, map[string]any{"name": "data", "size_gib": 10}, &data)
	e.must(201, "POST", "/v1/volumes", e.tenantA.Key, map[string]any{"name": "scratch", "size_gib": v5}, &scratch)
	status, _, body = e.call("POST", "/v1/volumes", e.tenantA.Key, map[string]any{"name": "third", "size_gib": 0 + 1}, nil)
	if status != 403 || !strings.Contains(string(body), "volumes quota exceeded") {
		t.Fatalf("over volumes: %d %s", status, body)
	}
	var ten store.Tenant
	e.must(200, "GET", "/v1/tenants/"+e.tenantA.ID, e.operator, nil, &ten)
	if ten.UsedVolumes != 2 || ten.UsedVolumeGiB != 15 || ten.QuotaVolumes != 2 {
		t.Fatalf("tenant usage %+v", ten)
	}
	if data.State != "available" || data.SizeGiB != 10 || data.HostID != nil {
		t.Fatalf("created %+v", data)
	}

	_, vm1, b1 := e.create(e.tenantA.Key, "vm1", e.cpuType)
	_, vm2, b2 := e.create(e.tenantA.Key, "vm2", e.cpuType)
	_, other, b3 := e.create(e.tenantB.Key, "b-vm", e.cpuType)
	if vm1.ID == uuid.Nil || vm2.ID == uuid.Nil || other.ID == uuid.Nil {
		t.Fatalf("creates: %s %s %s", b1, b2, b3)
	}
	report(vm1.ID, "running")

	// Tenant B sees none of A's volumes and cannot touch them; A cannot attach to B's instance.
	var bList server.Page[store.Volume]
	e.must(200, "GET", "/v1/volumes", e.tenantB.Key, nil, &bList)
	if len(bList.Items) != 0 {
		t.Fatalf("tenant B lists %+v", bList.Items)
	}
	vol := "/v1/volumes/" + data.ID.String()
	e.must(404, "GET", vol, e.tenantB.Key, nil, nil)
	e.must(404, "POST", vol+"/attach", e.tenantB.Key, map[string]any{"instance_id": other.ID}, nil)
	e.must(404, "POST", vol+"/detach", e.tenantB.Key, nil, nil)
	e.must(404, "DELETE", vol, e.tenantB.Key, nil, nil)
	status, _, body = e.call("POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": other.ID}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"instance_id"`) {
		t.Fatalf("attach to another tenant's instance: %d %s", status, body)
	}
	status, _, body = e.call("POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": "nope"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"instance_id"`) {
		t.Fatalf("attach to a bad id: %d %s", status, body)
	}

	var att store.Volume
	e.must(200, "POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": vm1.ID}, &att)
	if att.State != "attached" || att.InstanceID == nil || *att.InstanceID != vm1.ID || att.Device != "vdb" || att.HostID == nil {
		t.Fatalf("attached %+v", att)
	}
	e.must(200, "POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": vm1.ID}, nil) // again: no change
	e.must(409, "POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": vm2.ID}, nil)
	e.must(409, "DELETE", vol, e.tenantA.Key, nil, nil)
	var second store.Volume
	e.must(200, "POST", "/v1/volumes/"+scratch.ID.String()+"/attach", e.tenantA.Key, map[string]any{"instance_id": vm1.ID}, &second)
	if second.Device != "vdc" {
		t.Fatalf("second volume on %q", second.Device)
	}

	// The host is told to keep both volumes and to give vm1 both disks.
	var desired api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Volumes) != 2 {
		t.Fatalf("host volumes %+v", desired.Volumes)
	}
	for _, d := range desired.Instances {
		want := 0
		if d.ID == vm1.ID.String() {
			want = 2
		}
		if len(d.Spec.Volumes) != want {
			t.Fatalf("instance %s gets volumes %+v, want %d", d.Name, d.Spec.Volumes, want)
		}
	}
	e.must(200, "POST", "/v1/volumes/"+scratch.ID.String()+"/detach", e.tenantA.Key, nil, nil)

	// Deleting vm1 detaches its volume once the host has deleted it; the data stays.
	e.must(202, "DELETE", "/v1/instances/"+vm1.ID.String(), e.tenantA.Key, nil, nil)
	var still store.Volume
	e.must(200, "GET", vol, e.tenantA.Key, nil, &still)
	if still.State != "attached" {
		t.Fatalf("volume of a deleting instance: %+v", still)
	}
	report(vm1.ID, "deleted")
	still = store.Volume{} // omitted fields must not keep the last answer's values
	e.must(200, "GET", vol, e.tenantA.Key, nil, &still)
	if still.State != "available" || still.InstanceID != nil || still.Device != "" || still.HostID == nil {
		t.Fatalf("volume after its instance's deletion: %+v", still)
	}
	e.must(200, "POST", vol+"/attach", e.tenantA.Key, map[string]any{"instance_id": vm2.ID}, &att)
	if *att.InstanceID != vm2.ID || att.Device != "vdb" {
		t.Fatalf("reattached %+v", att)
	}
	e.must(200, "POST", vol+"/detach", e.tenantA.Key, nil, nil)

	// Deleting gives the quota back, ends the storage interval, and the host drops the data.
	clock.Set(t0.Add(3 * time.Hour))
	e.must(204, "DELETE", vol, e.tenantA.Key, nil, nil)
	e.must(404, "GET", vol, e.tenantA.Key, nil, nil)
	e.must(200, "GET", "/v1/tenants/"+e.tenantA.ID, e.operator, nil, &ten)
	if ten.UsedVolumes != 1 || ten.UsedVolumeGiB != 5 {
		t.Fatalf("tenant usage after delete %+v", ten)
	}
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Volumes) != 1 || desired.Volumes[0].ID != scratch.ID.String() {
		t.Fatalf("host volumes after delete %+v", desired.Volumes)
	}
	var mib int64
	var held time.Duration
	if err := e.st.Pool.QueryRow(ctx, `SELECT quantity, ended_at - started_at FROM billing_allocations
		WHERE kind = 'storage' AND resource_id = $1`, "volume/"+data.ID.String()).Scan(&mib, &held); err != nil {
		t.Fatal(err)
	}
	if mib != 10*1024 || held != 3*time.Hour {
		t.Fatalf("storage held %d MiB for %s, want 10 GiB for 3h", mib, held)
	}
}

// A host reports a VM's address on its tenant network; the tenant sees it. An address outside
// the tenant networks' range, or not an address, is refused naming the field and changes nothing.
func TestPrivateAddressReported(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	_, vm, body := e.create(e.tenantA.Key, "vm", e.cpuType)
	if vm.ID == uuid.Nil {
		t.Fatal(string(body))
	}
	path := "/v1/agent/host/instances/" + vm.ID.String() + "/status"
	for _, bad := range []string{"192.168.1.5", "10.0.0.1", "nope", "fd00::1"} {
		status, _, body := e.call("PUT", path, hostKey, api.InstanceObserved{State: "running", PrivateAddress: bad}, nil)
		if status != 400 || !strings.Contains(string(body), `"field":"private_address"`) {
			t.Errorf("address %q: %d %s", bad, status, body)
		}
	}
	e.must(204, "PUT", path, hostKey, api.InstanceObserved{State: "running", PrivateAddress: "10.128.1.7"}, nil)
	e.must(204, "PUT", path, hostKey, api.InstanceObserved{State: "running"}, nil) // not known this pass: kept
	var got store.Instance
	e.must(200, "GET", "/v1/instances/"+vm.ID.String(), e.tenantA.Key, nil, &got)
	if got.PrivateAddress != "10.128.1.7" || got.State != "running" {
		t.Fatalf("instance %+v", got)
	}
}

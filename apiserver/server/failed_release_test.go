package server_test

import (
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/store"
)

// A VM that fails before it ever ran gives back its GPU, host room and quota at once: the next
// create is placed, the failed record stays with its reason, and deleting it later releases
// nothing twice.
func TestNeverStartedFailureReleasesAtOnce(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	e.gpuServer("g1", 1)
	status, first, body := e.create(e.tenantA.Key, "vm1", e.dedType)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	id := first.ID.String()
	if status, _, body := e.create(e.tenantA.Key, "vm2", e.dedType); status != 503 {
		t.Fatalf("second create while the only GPU is held: %d %s", status, body)
	}
	e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "provisioning"}, nil)
	e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey,
		api.InstanceObserved{State: "failed", Reason: `image "ubuntu-24.04" not found`, VFPCIAddress: "0000:3b:00.2"}, nil)

	var failed store.Instance
	e.must(200, "GET", "/v1/instances/"+id, e.tenantA.Key, nil, &failed)
	if failed.State != "failed" || failed.FailureReason != `image "ubuntu-24.04" not found` || !failed.Released || failed.VFPCIAddress != "" {
		t.Fatalf("failed instance %+v", failed)
	}
	var desired api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Instances) != 0 {
		t.Fatalf("the host still keeps a released instance: %+v", desired)
	}
	used := func() (gpuBytes int64, vcpus, instances, reservations int) {
		t.Helper()
		if err := e.st.Pool.QueryRow(t.Context(), `SELECT (SELECT sum(reserved_bytes) FROM gpus), (SELECT sum(used_vcpus) FROM hosts),
			(SELECT used_instances FROM tenants WHERE id = $1), (SELECT count(*) FROM gpu_reservations)`, e.tenantA.ID).
			Scan(&gpuBytes, &vcpus, &instances, &reservations); err != nil {
			t.Fatal(err)
		}
		return
	}
	if g, v, n, r := used(); g != 0 || v != 0 || n != 0 || r != 0 {
		t.Fatalf("after the failure: %d GPU bytes, %d vCPUs, %d instances, %d reservations still held", g, v, n, r)
	}
	status, second, body := e.create(e.tenantA.Key, "vm2", e.dedType)
	if status != 201 {
		t.Fatalf("create after the failure was refused: %d %s", status, body)
	}
	// Deleting the failed record needs nothing of its host and releases nothing a second time.
	var gone store.Instance
	e.must(202, "DELETE", "/v1/instances/"+id, e.tenantA.Key, nil, &gone)
	if gone.State != "deleted" {
		t.Fatalf("released instance deleted to %s", gone.State)
	}
	if g, v, n, r := used(); g != 80*gib || v != second.VCPUs || n != 1 || r != 1 {
		t.Fatalf("with vm2 alone: %d GPU bytes, %d vCPUs, %d instances, %d reservations", g, v, n, r)
	}
	// A failure after the VM ran keeps what it holds (its host still has the domain).
	sid := second.ID.String()
	e.must(204, "PUT", "/v1/agent/host/instances/"+sid+"/status", hostKey, api.InstanceObserved{State: "running"}, nil)
	e.must(204, "PUT", "/v1/agent/host/instances/"+sid+"/status", hostKey, api.InstanceObserved{State: "failed", Reason: "qemu crashed"}, nil)
	if g, _, n, _ := used(); g != 80*gib || n != 1 {
		t.Fatalf("a VM that ran released on failure: %d GPU bytes, %d instances", g, n)
	}
}

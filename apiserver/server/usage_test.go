package server_test

import (
	"strings"
	"testing"
	"time"

	"gpucloud/api"
)

// TestDaemonBillsOnlyItsOwnInstances posts usage as a compromised daemon would: a host billing
// GPU usage, a GPU server billing VM usage, a GPU server billing an instance placed on another,
// a forged tenant or size, and a host writing into a GPU server's id namespace to make the
// server's real record a duplicate. Each forged record is refused with the field it got wrong;
// the daemons' honest records in the same batches land.
func TestDaemonBillsOnlyItsOwnInstances(t *testing.T) {
	e := newEnv(t, envOpts{billing: true})
	hostKey := e.host("h1", 32, 65536)
	gpuKey, gpuAck := e.gpuServer("g1", 1)
	status, inst, body := e.create(e.tenantA.Key, "vm", e.shrType)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	otherGPUKey, otherAck := e.gpuServer("g2", 1) // registered after placement: holds nothing
	host, gpu, otherGPU := hostID(t, e, hostKey), gpuAck.GPUServerID, otherAck.GPUServerID
	if inst.HostID.String() != host || inst.GPUServerID == nil || inst.GPUServerID.String() != gpu {
		t.Fatalf("placed on %s/%v, want %s/%s", inst.HostID, inst.GPUServerID, host, gpu)
	}
	id, tenant := inst.ID.String(), e.tenantA.ID
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	vm := func(src, recID string) api.UsageRecord {
		return api.UsageRecord{ID: src + "/" + recID, Kind: api.UsageVM, Source: src, TenantID: tenant, InstanceID: id,
			Start: start, End: start.Add(10 * time.Minute), InstanceType: "h100-shared", VCPUs: 2, MemoryMiB: 4096}
	}
	gpuRec := func(src, recID string) api.UsageRecord {
		return api.UsageRecord{ID: src + "/" + recID, Kind: api.UsageGPU, Source: src, TenantID: tenant, InstanceID: id,
			SessionID: id, Start: start, End: start.Add(10 * time.Minute), GPUModel: "NVIDIA H100 80GB HBM3",
			Tier: "shared", GPUCount: 1, MemoryQuota: uint64(10 * gib)}
	}
	post := func(key string, recs ...api.UsageRecord) api.UsageBatchResult {
		t.Helper()
		var res api.UsageBatchResult
		e.must(200, "POST", "/v1/agent/usage", key, api.UsageBatch{Records: recs}, &res)
		return res
	}
	refused := func(res api.UsageBatchResult, index int, field string) {
		t.Helper()
		for _, r := range res.Rejected {
			if r.Index == index {
				if !strings.HasPrefix(r.Reason, field+":") {
					t.Errorf("record %d refused for %q, want the field %s named", index, r.Reason, field)
				}
				return
			}
		}
		t.Errorf("record %d accepted, want it refused for %s: %+v", index, field, res)
	}

	// A host credential: its own VM record lands; GPU usage (even of its own instance, even
	// under another tenant with 8 GPUs) and records in the GPU server's namespace do not.
	hostGPU := gpuRec(host, "forged")
	hostGPU.TenantID, hostGPU.GPUCount = e.tenantB.ID, 8
	squat := vm(host, "x")
	squat.ID = gpu + "/" + id + "/1" // the id the GPU server's real record has
	res := post(hostKey, vm(host, "w1"), hostGPU, squat)
	refused(res, 1, "kind")
	refused(res, 2, "id")
	if res.Accepted != 1 || len(res.Rejected) != 2 {
		t.Fatalf("host batch %+v, want its own VM record only", res)
	}

	// A GPU server's credential: its own GPU record lands, not a duplicate of the host's squat;
	// VM usage, another tenant, a bigger grant and another server's instance do not.
	gpuVM := vm(gpu, "vm")
	otherTenant := gpuRec(gpu, "t")
	otherTenant.TenantID = e.tenantB.ID
	bigger := gpuRec(gpu, "b")
	bigger.GPUCount = 8
	cheaper := gpuRec(gpu, "c")
	cheaper.Tier = "dedicated"
	cheaper.MemoryQuota = 0
	res = post(gpuKey, gpuRec(gpu, id+"/1"), gpuVM, otherTenant, bigger, cheaper)
	refused(res, 1, "kind")
	refused(res, 2, "tenant_id")
	refused(res, 3, "gpu_count")
	refused(res, 4, "tier")
	if res.Accepted != 1 || res.Duplicates != 0 || len(res.Rejected) != 4 {
		t.Fatalf("GPU server batch %+v, want its own record accepted (not a duplicate)", res)
	}
	// The same batch in the binary usage form (gpuserverd's), with new ids: the same checks.
	var bin api.UsageBatchResult
	recs := []api.UsageRecord{gpuRec(gpu, id+"/2"), gpuVM, otherTenant, bigger, cheaper}
	for i := 1; i < len(recs); i++ {
		recs[i].ID += "-bin"
	}
	e.must(200, "POST", "/v1/agent/usage", gpuKey, api.AppendUsageBatch(nil, recs), &bin, "Content-Type", api.UsageBatchBinary)
	refused(bin, 1, "kind")
	refused(bin, 2, "tenant_id")
	refused(bin, 3, "gpu_count")
	refused(bin, 4, "tier")
	if bin.Accepted != 1 || len(bin.Rejected) != 4 {
		t.Fatalf("GPU server batch in binary %+v, want its own record accepted only", bin)
	}
	res = post(otherGPUKey, gpuRec(otherGPU, "o"))
	refused(res, 0, "instance_id")
	unknown := gpuRec(gpu, "u")
	unknown.InstanceID = "01890000-0000-7000-8000-000000000000"
	refused(post(gpuKey, unknown), 0, "instance_id")
	// And the other host cannot bill the instance either.
	otherHost := e.host("h2", 32, 65536)
	h2 := hostID(t, e, otherHost)
	refused(post(otherHost, vm(h2, "w1")), 0, "instance_id")
}

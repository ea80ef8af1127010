package api

import "time"

// Usage record kinds.
const (
	UsageGPU = "gpu" // a gpuserverd session's GPU time and memory
	UsageVM  = "vm"  // a hostd VM's running time
)

// UsageRecord is one metered interval, emitted by gpuserverd (kind gpu) or hostd (kind vm) and
// ingested by billing exactly once by ID. Quantities are integers: no floating point on the way to
// money.
//
// Billing takes a record only from the daemon it names: its Source and the first segment of its
// ID are the caller's own id (so no daemon can make another's record a duplicate), a host sends
// kind vm and a GPU server kind gpu, and only for instances placed on it, with the tenant, type,
// size, tier and GPU count the control plane holds. Any other record is listed in the batch's
// Rejected with the field that is wrong; the rest of the batch lands (one bad record must not
// hold back a daemon's honest usage, and resending cannot fix it).
//
//	POST /v1/agent/usage   UsageBatch -> UsageBatchResult   (daemons push)
//	GET  /usage?after=ID   on gpuserverd's metrics port      (billing pulls)
type UsageRecord struct {
	// ID is unique across the platform: "<source id>/<session or instance id>/<sequence>"; the
	// source id prefix is required.
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Source     string    `json:"source"` // GPU server or host id
	TenantID   string    `json:"tenant_id"`
	InstanceID string    `json:"instance_id"`
	SessionID  string    `json:"session_id,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`

	// Kind gpu.
	GPUModel        string `json:"gpu_model,omitempty"`
	Tier            string `json:"tier,omitempty"`
	GPUCount        int    `json:"gpu_count,omitempty"`
	MemoryQuota     uint64 `json:"memory_quota,omitempty"` // bytes per GPU the session may hold; 0 = whole GPU
	MemoryPeakBytes uint64 `json:"memory_peak_bytes,omitempty"`
	MemoryAvgBytes  uint64 `json:"memory_avg_bytes,omitempty"`
	BytesMoved      uint64 `json:"bytes_moved,omitempty"`

	// Kind vm.
	InstanceType string `json:"instance_type,omitempty"`
	VCPUs        int    `json:"vcpus,omitempty"`
	MemoryMiB    int    `json:"memory_mib,omitempty"`
}

// UsageBatch carries up to 1,000 records.
type UsageBatch struct {
	Records []UsageRecord `json:"records"`
}

// UsageRejection names a record refused and why; the rest of its batch still lands.
type UsageRejection struct {
	Index  int    `json:"index"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// UsageBatchResult tells what became of a batch.
type UsageBatchResult struct {
	Accepted   int              `json:"accepted"`
	Duplicates int              `json:"duplicates"`
	Rejected   []UsageRejection `json:"rejected"`
}

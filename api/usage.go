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
//	POST /v1/agent/usage   UsageBatch -> UsageBatchResult   (daemons push)
//	GET  /usage?after=ID   on gpuserverd's metrics port      (billing pulls)
type UsageRecord struct {
	// ID is unique across the platform: "<source id>/<session or instance id>/<sequence>".
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

package sdk

import (
	"encoding/json"
	"time"
)

// Ids are strings (UUIDs) so callers can pass what they read from a terminal as they are.

// Me is who the caller is.
type Me struct {
	UserID   string `json:"user_id,omitempty"`
	TenantID string `json:"tenant_id,omitempty"`
	DaemonID string `json:"daemon_id,omitempty"`
	Role     string `json:"role"`
}

// Tenant is a customer with its quotas and current usage.
type Tenant struct {
	ID                  string    `json:"id"`
	Name                string    `json:"name"`
	PartitionKey        int       `json:"partition_key"`
	QuotaInstances      int       `json:"quota_instances"`
	QuotaGPUs           int       `json:"quota_gpus"`
	QuotaGPUMemoryBytes int64     `json:"quota_gpu_memory_bytes"`
	UsedInstances       int       `json:"used_instances"`
	UsedGPUs            int       `json:"used_gpus"`
	UsedGPUMemoryBytes  int64     `json:"used_gpu_memory_bytes"`
	QuotaVolumes        int       `json:"quota_volumes"`
	QuotaVolumeGiB      int       `json:"quota_volume_gib"`
	UsedVolumes         int       `json:"used_volumes"`
	UsedVolumeGiB       int       `json:"used_volume_gib"`
	CreatedAt           time.Time `json:"created_at"`
}

// CreateTenantRequest creates a tenant with its quotas.
type CreateTenantRequest struct {
	Name                string `json:"name"`
	QuotaInstances      int    `json:"quota_instances"`
	QuotaGPUs           int    `json:"quota_gpus"`
	QuotaGPUMemoryBytes int64  `json:"quota_gpu_memory_bytes"`
}

// Quota sets a tenant's limits.
type Quota struct {
	Instances      int   `json:"instances"`
	GPUs           int   `json:"gpus"`
	GPUMemoryBytes int64 `json:"gpu_memory_bytes"`
	// Volumes and VolumeGiB limit the tenant's volumes (count, total GiB); nil: unchanged.
	Volumes   *int `json:"volumes,omitempty"`
	VolumeGiB *int `json:"volume_gib,omitempty"`
}

// User is a person with a role; tenant roles carry their tenant.
type User struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id,omitempty"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// Roles.
const (
	RoleTenantAdmin  = "tenant-admin"
	RoleTenantMember = "tenant-member"
	RoleOperator     = "operator"
	RoleFinance      = "finance"
)

// CreateUserRequest invites a user; TenantID is required exactly for tenant roles.
type CreateUserRequest struct {
	Email    string `json:"email"`
	Role     string `json:"role"`
	TenantID string `json:"tenant_id,omitempty"`
}

// APIKey is a key's record; its secret is only in NewAPIKey.
type APIKey struct {
	ID         string     `json:"id"`
	UserID     string     `json:"user_id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// NewAPIKey is a fresh key with its secret, shown once.
type NewAPIKey struct {
	APIKey
	Secret string `json:"secret"`
}

// GPUModel is a catalogued GPU.
type GPUModel struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	MemoryBytes int64     `json:"memory_bytes"`
	NVMLMatch   string    `json:"nvml_match"`
	CreatedAt   time.Time `json:"created_at"`
}

// CreateGPUModelRequest adds a GPU model.
type CreateGPUModelRequest struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
	NVMLMatch   string `json:"nvml_match"`
}

// Tier is dedicated (whole GPUs) or shared (a memory slice of one).
type Tier struct {
	Name             string `json:"name"`
	MemorySliceBytes *int64 `json:"memory_slice_bytes,omitempty"`
}

// InstanceType is a machine shape with its hourly price in minor currency units.
type InstanceType struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	VCPUs        int       `json:"vcpus"`
	MemoryMiB    int       `json:"memory_mib"`
	DiskGiB      int       `json:"disk_gib"`
	GPUModelID   string    `json:"gpu_model_id,omitempty"`
	GPUCount     int       `json:"gpu_count"`
	Tier         string    `json:"tier"`
	PricePerHour int64     `json:"price_per_hour"`
	Currency     string    `json:"currency"`
	CreatedAt    time.Time `json:"created_at"`
}

// CreateInstanceTypeRequest adds an instance type; GPUModelID is required when GPUCount > 0.
type CreateInstanceTypeRequest struct {
	Name         string `json:"name"`
	VCPUs        int    `json:"vcpus"`
	MemoryMiB    int    `json:"memory_mib"`
	DiskGiB      int    `json:"disk_gib"`
	GPUModelID   string `json:"gpu_model_id,omitempty"`
	GPUCount     int    `json:"gpu_count"`
	Tier         string `json:"tier"`
	PricePerHour int64  `json:"price_per_hour"`
	Currency     string `json:"currency,omitempty"`
}

// Instance is a VM.
type Instance struct {
	ID               string `json:"id"`
	TenantID         string `json:"tenant_id"`
	Name             string `json:"name"`
	InstanceTypeID   string `json:"instance_type_id"`
	Image            string `json:"image"`
	SSHKey           string `json:"ssh_key,omitempty"`
	State            string `json:"state"`
	DesiredState     string `json:"desired_state"`
	FailureReason    string `json:"failure_reason,omitempty"`
	HostID           string `json:"host_id"`
	GPUServerID      string `json:"gpu_server_id,omitempty"`
	VCPUs            int    `json:"vcpus"`
	MemoryMiB        int    `json:"memory_mib"`
	DiskGiB          int    `json:"disk_gib"`
	Tier             string `json:"tier"`
	GPUModel         string `json:"gpu_model,omitempty"`
	GPUCount         int    `json:"gpu_count"`
	GPUMemoryBytes   int64  `json:"gpu_memory_bytes"`
	RebootGeneration int64  `json:"reboot_generation"`
	VFPCIAddress     string `json:"vf_pci_address,omitempty"`
	// ForwardPorts are the extra guest ports the tenant asked to reach (besides SSH's 22).
	ForwardPorts []int `json:"forward_ports,omitempty"`
	// SSH is how to log in, once the host forwarded a port to the guest's 22.
	SSH *SSHEndpoint `json:"ssh,omitempty"`
	// Ports are every forwarded port (22 first), reachable at SSH.Host.
	Ports []PortForward `json:"ports,omitempty"`
	// PrivateAddress is the VM's address on its tenant's network, once its host knows it.
	PrivateAddress string `json:"private_address,omitempty"`
	// Released: a VM that failed before it ran gave back its GPU, host room and quota.
	Released  bool      `json:"released,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Conditions: HostReachable for every live instance, GPUServerReachable for one with GPUs
	// on a GPU server; empty for deleted instances. See Unhealthy.
	Conditions []Condition `json:"conditions"`
}

// Condition is an observation about an instance, Kubernetes style: Status is "True" when all
// is well; when "False", Since says from when (the daemon was marked unreachable) and Message why.
type Condition struct {
	Type    string     `json:"type"`
	Status  string     `json:"status"`
	Since   *time.Time `json:"since,omitempty"`
	Message string     `json:"message,omitempty"`
}

// Condition types and statuses.
const (
	ConditionHostReachable      = "HostReachable"
	ConditionGPUServerReachable = "GPUServerReachable"
	ConditionTrue               = "True"
	ConditionFalse              = "False"
)

// Unhealthy returns the instance's conditions that are not "True": empty when all is well.
func (i Instance) Unhealthy() []Condition {
	var out []Condition
	for _, c := range i.Conditions {
		if c.Status != ConditionTrue {
			out = append(out, c)
		}
	}
	return out
}

// Instance states.
const (
	StatePending      = "pending"
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateDeleting     = "deleting"
	StateDeleted      = "deleted"
	StateFailed       = "failed"
)

// CreateInstanceRequest asks for a VM of an instance type.
type CreateInstanceRequest struct {
	Name           string `json:"name"`
	InstanceTypeID string `json:"instance_type_id"`
	Image          string `json:"image"`
	SSHKey         string `json:"ssh_key,omitempty"`
	// SSHKeyIDs name the caller's keys (/v1/ssh-keys) the VM accepts; at most 10.
	SSHKeyIDs []string `json:"ssh_key_ids,omitempty"`
	// UserData is cloud-init user-data: "#cloud-config" YAML or a "#!" script, at most 16 KiB.
	UserData string `json:"user_data,omitempty"`
	// ForwardPorts: up to 4 guest TCP ports (besides 22) to reach from outside.
	ForwardPorts []int `json:"forward_ports,omitempty"`
}

// SSHEndpoint is where to log in to an instance; Command is ready to paste.
type SSHEndpoint struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	User    string `json:"user"`
	Command string `json:"command"`
}

// PortForward is a host port forwarded to a guest port.
type PortForward struct {
	GuestPort int `json:"guest_port"`
	HostPort  int `json:"host_port"`
}

// ConsoleLog is the tail of an instance's serial console.
type ConsoleLog struct {
	InstanceID string     `json:"instance_id"`
	Log        string     `json:"log"`
	UpdatedAt  *time.Time `json:"updated_at,omitempty"`
}

// Event is one state transition of an instance.
type Event struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

// Host is a VM host.
type Host struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	Hostname        string     `json:"hostname"`
	Hypervisor      string     `json:"hypervisor"`
	Version         string     `json:"version"`
	VCPUs           int        `json:"vcpus"`
	MemoryMiB       int        `json:"memory_mib"`
	DiskGiB         int        `json:"disk_gib"`
	InfiniBandVFs   int        `json:"infiniband_vfs"`
	UsedVCPUs       int        `json:"used_vcpus"`
	UsedMemoryMiB   int        `json:"used_memory_mib"`
	UsedDiskGiB     int        `json:"used_disk_gib"`
	Status          string     `json:"status"`
	Cordoned        bool       `json:"cordoned"`
	Draining        bool       `json:"draining"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
}

// GPU is one GPU of a GPU server.
type GPU struct {
	ID            string `json:"id"`
	UUID          string `json:"uuid"`
	Index         int    `json:"index"`
	Name          string `json:"name"`
	GPUModelID    string `json:"gpu_model_id,omitempty"`
	MemoryBytes   int64  `json:"memory_bytes"`
	ReservedBytes int64  `json:"reserved_bytes"`
	Healthy       bool   `json:"healthy"`
}

// GPUServer is a machine whose GPUs are shared over the network.
type GPUServer struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	Hostname        string     `json:"hostname"`
	Endpoint        string     `json:"endpoint"`
	Backend         string     `json:"backend"`
	Version         string     `json:"version"`
	ActiveSessions  int        `json:"active_sessions"`
	Status          string     `json:"status"`
	Cordoned        bool       `json:"cordoned"`
	Draining        bool       `json:"draining"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	GPUs            []GPU      `json:"gpus"`
}

// NewDaemon is a registered host or GPU server with its credential, shown once.
type NewDaemon struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

// AuditEntry is one recorded change.
type AuditEntry struct {
	ID           int64           `json:"id"`
	At           time.Time       `json:"at"`
	ActorUserID  string          `json:"actor_user_id,omitempty"`
	ActorRole    string          `json:"actor_role"`
	ActorDaemon  string          `json:"actor_daemon,omitempty"`
	TenantID     string          `json:"tenant_id,omitempty"`
	Action       string          `json:"action"`
	ResourceType string          `json:"resource_type"`
	ResourceID   string          `json:"resource_id"`
	RequestID    string          `json:"request_id"`
	Detail       json.RawMessage `json:"detail"`
}

// Package api holds the JSON contract between the apiserver and the platform's daemons (hostd,
// gpuserverd). Both sides import these types, so a field renamed on one side is renamed on the
// other. The public REST resources live with the apiserver and the SDK; this is the agent API.
//
// Daemons authenticate with the credential the operator got when creating the host or GPU server
// (POST /v1/hosts, POST /v1/gpu-servers), sent as "Authorization: Bearer <credential>".
//
//	POST /v1/agent/host/heartbeat              HostReport        -> HostAck
//	GET  /v1/agent/host/instances              -                 -> DesiredInstances
//	PUT  /v1/agent/host/instances/{id}/status  InstanceObserved  -> 204
//	POST /v1/agent/host/instances/{id}/token   -                 -> SessionToken (renewal)
//	PUT  /v1/agent/host/moves/{id}             HostMoveReport    -> 204
//	POST /v1/agent/gpu-server/heartbeat        GPUServerReport   -> GPUServerAck
package api

import "time"

// HostCapacity is what a VM host offers.
type HostCapacity struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	DiskGiB   int `json:"disk_gib"`
	// InfiniBandVFs is the number of SR-IOV virtual functions the host can give to VMs (0: no IB).
	InfiniBandVFs int `json:"infiniband_vfs"`
}

// HostReport is hostd's registration and heartbeat; the first one registers the host.
type HostReport struct {
	Hostname   string       `json:"hostname"`
	Hypervisor string       `json:"hypervisor"` // libvirt URI in use, e.g. "qemu:///system"
	Capacity   HostCapacity `json:"capacity"`
	Version    string       `json:"version"`
	// ConsoleURL is where the apiserver opens instances' serial consoles on this host
	// (ws:// or wss://, see ConsolePath); empty when the host serves none.
	ConsoleURL string `json:"console_url,omitempty"`
	// TransferEndpoint is host:port where a drain's target hostd pulls the disks of a VM moving
	// off this host (hostd --transfer-listen); "" when this host cannot be a move's source.
	TransferEndpoint string `json:"transfer_endpoint,omitempty"`
}

// HostAck answers a heartbeat.
type HostAck struct {
	HostID          string        `json:"host_id"`
	Cordoned        bool          `json:"cordoned"`
	HeartbeatPeriod time.Duration `json:"heartbeat_period_ns"`
	// ConsoleKey is the apiserver's Ed25519 public key (base64) that signs console grants
	// (internal/consolegrant).
	ConsoleKey string `json:"console_key,omitempty"`
}

// Desired states of an instance as the apiserver wants it on a host.
const (
	DesiredRunning = "running"
	DesiredStopped = "stopped"
	DesiredDeleted = "deleted"
)

// Observed states a daemon reports.
const (
	ObservedProvisioning = "provisioning"
	ObservedRunning      = "running"
	ObservedStopped      = "stopped"
	ObservedDeleted      = "deleted"
	ObservedFailed       = "failed"
)

// InstanceSpec is the machine a VM gets.
type InstanceSpec struct {
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	DiskGiB   int    `json:"disk_gib"`
	Image     string `json:"image"`
	// ImageSource is where the host fetches the image (file:// or http(s)://) and ImageSHA256
	// what its bytes must hash to; empty for an image only found in the host's images dir.
	ImageSource string `json:"image_source,omitempty"`
	ImageSHA256 string `json:"image_sha256,omitempty"`
	SSHKey      string `json:"ssh_key,omitempty"`
	// SSHKeys are the authorized_keys lines the VM accepts (SSHKey among them when set).
	SSHKeys []string `json:"ssh_keys,omitempty"`
	// UserData is the tenant's cloud-init user-data ("#cloud-config" or "#!"), validated.
	UserData string `json:"user_data,omitempty"`
	// ForwardPorts are guest TCP ports (besides 22) the tenant wants reachable from outside.
	ForwardPorts []int `json:"forward_ports,omitempty"`
	// Volumes are the tenant's volumes attached to the instance, each a disk of the VM.
	Volumes []VolumeAttachment `json:"volumes,omitempty"`
}

// VolumeAttachment is a volume attached to an instance as a guest disk.
type VolumeAttachment struct {
	ID     string `json:"id"`
	Device string `json:"device"` // vdb..vdi
}

// DesiredVolume is a volume whose data lives in the host's storage pool.
type DesiredVolume struct {
	ID      string `json:"id"`
	SizeGiB int    `json:"size_gib"`
}

// GPUGrant is the GPU capacity reserved for an instance and how its guest library reaches it.
type GPUGrant struct {
	GPUServerID string   `json:"gpu_server_id"`
	Endpoints   []string `json:"endpoints"` // host:port of gpuserverd, in preference order
	GPUUUIDs    []string `json:"gpu_uuids"`
	Model       string   `json:"model"`
	Tier        string   `json:"tier"`         // "dedicated" or "shared"
	MemoryQuota uint64   `json:"memory_quota"` // bytes per GPU; 0 = whole GPU
}

// SessionToken admits a guest library to gpuserverd (see internal/sessiontoken).
type SessionToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// DesiredInstance is one instance placed on the asking host, as the apiserver wants it.
type DesiredInstance struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	// InstanceType is the name of the instance's type, which VM usage records carry for pricing.
	InstanceType string `json:"instance_type"`
	DesiredState string `json:"desired_state"`
	// RebootGeneration grows by one per reboot request; a host reboots a running VM whose
	// last observed generation is lower.
	RebootGeneration int64        `json:"reboot_generation"`
	Spec             InstanceSpec `json:"spec"`
	GPU              *GPUGrant    `json:"gpu,omitempty"`
	Token            SessionToken `json:"session_token"`
	// PartitionKey is the InfiniBand partition of the tenant (0x0001-0x7fff).
	PartitionKey uint16 `json:"partition_key"`
	// Move, when set, is a host drain's open move of this instance (docs/hostd.md, "A drain that
	// moves VMs"): this host is its source or its target.
	Move *HostMove `json:"move,omitempty"`
}

// Roles of a host in a move, and the move's phases as the apiserver hands them out.
const (
	MoveOut = "out" // this host is the source
	MoveIn  = "in"  // this host is the target

	MovePending = "pending" // the source stops the VM and offers its disks
	MoveCopying = "copying" // the target pulls the disks, defines and starts the VM
)

// HostMove is a host drain's open move as one of its two hosts needs it.
type HostMove struct {
	ID    string `json:"id"`
	Role  string `json:"role"`  // out or in
	Phase string `json:"phase"` // pending or copying
	Mode  string `json:"mode"`  // restart (live moves are refused when planned; see the drain's reasons)
	// Secret admits the target to the source's transfer endpoint for this move's files.
	Secret string `json:"secret"`
	// Source is the source's transfer endpoint (host:port), for the target.
	Source string `json:"source,omitempty"`
	// PrivateAddress is the VM's address on its tenant network at the source, which the target
	// reserves for it where it is free ("" when unknown).
	PrivateAddress string `json:"private_address,omitempty"`
}

// Host move reports: the source says ready (the VM is off, its disks offered) or failed; the
// target says copying (with progress), done (the VM is defined, and started if wanted) or failed.
const (
	HostMoveReady   = "ready"
	HostMoveCopying = "copying"
	HostMoveDone    = "done"
	HostMoveFailed  = "failed"
)

// HostMoveReport is one host's word on a move.
type HostMoveReport struct {
	State       string `json:"state"`
	Reason      string `json:"reason,omitempty"`
	BytesCopied int64  `json:"bytes_copied"`
	BytesTotal  int64  `json:"bytes_total"`
	// Observed is the VM as the target runs it (ports, address), with done.
	Observed *InstanceObserved `json:"observed,omitempty"`
}

// DesiredInstances lists every instance placed on the host that is not yet deleted there.
type DesiredInstances struct {
	Instances []DesiredInstance `json:"instances"`
	// Volumes are every live volume the host keeps; a host deletes the volumes of its pool that
	// are not listed (deleted by their tenant).
	Volumes []DesiredVolume `json:"volumes"`
}

// InstanceObserved is what a host reports about one instance.
type InstanceObserved struct {
	State            string `json:"state"`
	Reason           string `json:"reason,omitempty"` // why, when State is failed
	RebootGeneration int64  `json:"reboot_generation"`
	VFPCIAddress     string `json:"vf_pci_address,omitempty"`
	ConsoleLogTail   string `json:"console_log_tail,omitempty"`
	// Forwards are the host ports forwarded to the VM's guest ports (22, SSH, first), reachable
	// at PublicHost.
	Forwards   []PortForward `json:"forwards,omitempty"`
	PublicHost string        `json:"public_host,omitempty"`
	// PrivateAddress is the VM's IPv4 address on its tenant network (its DHCP lease), if known.
	PrivateAddress string `json:"private_address,omitempty"`
}

// PortForward is a host TCP port forwarded to a guest port.
type PortForward struct {
	GuestPort int `json:"guest_port"`
	HostPort  int `json:"host_port"`
}

// GPUInfo is one GPU a GPU server owns.
type GPUInfo struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"` // NVML product name, e.g. "NVIDIA H100 80GB HBM3"
	MemoryBytes uint64 `json:"memory_bytes"`
	PCIBusID    string `json:"pci_bus_id"`
	Healthy     bool   `json:"healthy"`
}

// GPUServerReport is gpuserverd's registration and heartbeat.
type GPUServerReport struct {
	Hostname string    `json:"hostname"`
	Endpoint string    `json:"endpoint"` // host:port the guest library dials
	Backend  string    `json:"backend"`  // "cuda" or "simulated"
	GPUs     []GPUInfo `json:"gpus"`
	Version  string    `json:"version"`
	// ActiveSessions lists session ids currently served, so the apiserver can spot leaks.
	ActiveSessions []string `json:"active_sessions"`
	// Moves reports the drain moves this server was handed (GPUServerAck.Moves): under way, or
	// their outcome, until an ack no longer names them.
	Moves []MoveReport `json:"moves,omitempty"`
}

// Move states a GPU server reports.
const (
	MoveMoving = "moving"
	MoveDone   = "done"
	MoveFailed = "failed"
)

// GPUServerMove is a move a drain hands the source GPU server (docs/gpuserverd/sessions.md, "A
// drain that moves work"): every session of the instance goes to the target with Token, a
// session token minted for the target (its audience, its GPUs).
type GPUServerMove struct {
	MoveID     string       `json:"move_id"`
	InstanceID string       `json:"instance_id"`
	TargetID   string       `json:"target_id"`
	Target     string       `json:"target"` // the target's data endpoint, host:port
	Token      SessionToken `json:"token"`
}

// MoveReport is the source's word on one of its moves.
type MoveReport struct {
	MoveID        string  `json:"move_id"`
	State         string  `json:"state"` // moving, done or failed
	Reason        string  `json:"reason,omitempty"`
	SessionsMoved int     `json:"sessions_moved"`
	BytesCopied   uint64  `json:"bytes_copied"`
	BytesTotal    uint64  `json:"bytes_total"`
	PauseMs       float64 `json:"pause_ms"`
}

// GPUServerAck answers a heartbeat. The session-token public key lets gpuserverd verify tokens offline.
type GPUServerAck struct {
	GPUServerID     string        `json:"gpu_server_id"`
	Cordoned        bool          `json:"cordoned"`
	HeartbeatPeriod time.Duration `json:"heartbeat_period_ns"`
	TokenPublicKey  string        `json:"token_public_key"` // base64 Ed25519 public key
	// EndSessions names reported sessions whose instance is no longer live on this GPU server
	// (deleted, or never placed here): gpuserverd ends them.
	EndSessions []string `json:"end_sessions,omitempty"`
	// Moves are the drain's open moves off this GPU server (pending or under way).
	Moves []GPUServerMove `json:"moves,omitempty"`
}

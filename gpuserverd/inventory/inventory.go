// Package inventory reads a GPU server's GPUs through NVML: what they are (name, UUID, memory,
// compute capability, PCI bus id), how busy they are (utilisation, memory used, per-process
// memory, which quotas and metering use) and whether they are healthy.
//
// It talks to NVML through go-nvml's Interface, so tests drive it with go-nvml's own mock server.
package inventory

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"gpucloud/api"
)

// GPU is one GPU as NVML reports it.
type GPU struct {
	Index       int
	UUID        string
	Name        string
	MemoryTotal uint64
	MemoryUsed  uint64
	Major       int // compute capability
	Minor       int
	PCIBusID    string // normalised "0000:17:00.0"
	// Utilisation over NVML's last sample period, in percent; -1 when NVML does not report it.
	UtilGPU    int
	UtilMemory int
	Processes  []Process
	Health     Health
}

// Process is one process holding memory on a GPU.
type Process struct {
	PID        uint32
	MemoryUsed uint64 // bytes; NVML reports 0 where it cannot tell (e.g. in some containers)
}

// Health says whether a GPU should take new sessions, and why not.
type Health struct {
	Healthy bool
	// Problems lists what was wrong, e.g. "memory info: Unknown Error" or "row remapping failed".
	Problems []string
}

// Info is the GPU as the agent API reports it to the apiserver.
func (g GPU) Info() api.GPUInfo {
	return api.GPUInfo{
		Index:       g.Index,
		UUID:        g.UUID,
		Name:        g.Name,
		MemoryBytes: g.MemoryTotal,
		PCIBusID:    g.PCIBusID,
		Healthy:     g.Health.Healthy,
	}
}

// Inventory reads GPUs through an NVML library that is initialised.
type Inventory struct {
	lib nvml.Interface

	mu     sync.Mutex
	faults map[string][]uint64 // GPU UUID -> hardware Xids seen by WatchXIDs
}

// Open initialises lib (nvml.New() for the machine's libnvidia-ml.so.1) and returns an Inventory;
// Close shuts NVML down again.
func Open(lib nvml.Interface) (*Inventory, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("inventory: NVML library libnvidia-ml.so.1 not found (no NVIDIA driver on this machine): %w", ret)
		}
		return nil, fmt.Errorf("inventory: NVML init: %w", ret)
	}
	return &Inventory{lib: lib, faults: map[string][]uint64{}}, nil
}

// Close shuts NVML down.
func (inv *Inventory) Close() error {
	if ret := inv.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("inventory: NVML shutdown: %w", ret)
	}
	return nil
}

// DriverVersion is the NVIDIA driver's version string, e.g. "580.159.04".
func (inv *Inventory) DriverVersion() (string, error) {
	v, ret := inv.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("inventory: driver version: %w", ret)
	}
	return v, nil
}

// GPUs reads every GPU. A GPU that NVML cannot fully read is still listed, unhealthy, with what
// failed in Health.Problems, so one bad GPU never hides the others; only failing to count GPUs is
// an error.
func (inv *Inventory) GPUs() ([]GPU, error) {
	n, ret := inv.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("inventory: count GPUs: %w", ret)
	}
	gpus := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		gpus = append(gpus, inv.read(i))
	}
	return gpus, nil
}

// Infos is GPUs in the agent API's form.
func (inv *Inventory) Infos() ([]api.GPUInfo, error) {
	gpus, err := inv.GPUs()
	if err != nil {
		return nil, err
	}
	out := make([]api.GPUInfo, len(gpus))
	for i, g := range gpus {
		out[i] = g.Info()
	}
	return out, nil
}

// ErrNoGPU is returned for a UUID this server does not have.
var ErrNoGPU = errors.New("no such GPU")

// ProcessMemory returns the GPU memory each process holds on the GPU with this UUID: the true
// use of a session's worker process, which includes what the driver itself allocates for it.
func (inv *Inventory) ProcessMemory(uuid string) (map[uint32]uint64, error) {
	dev, err := inv.device(uuid)
	if err != nil {
		return nil, err
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("inventory: GPU %q: running processes: %w", uuid, ret)
	}
	out := make(map[uint32]uint64, len(procs))
	for _, p := range procs {
		out[p.Pid] += p.UsedGpuMemory
	}
	return out, nil
}

// device is the GPU with this UUID; ErrNoGPU when this server has none.
func (inv *Inventory) device(uuid string) (nvml.Device, error) {
	dev, ret := inv.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			return nil, fmt.Errorf("inventory: GPU %q: %w", uuid, ErrNoGPU)
		}
		return nil, fmt.Errorf("inventory: GPU %q: %w", uuid, ret)
	}
	return dev, nil
}

func (inv *Inventory) read(index int) GPU {
	g := GPU{Index: index, UtilGPU: -1, UtilMemory: -1, Health: Health{Healthy: true}}
	problem := func(what string, ret nvml.Return) {
		g.Health.Healthy = false
		g.Health.Problems = append(g.Health.Problems, fmt.Sprintf("%s: %v", what, ret))
	}
	dev, ret := inv.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		problem("handle", ret)
		return g
	}
	// Identity and memory must read: a GPU that cannot say what it is takes no sessions.
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		problem("uuid", ret)
	}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		problem("name", ret)
	}
	if mem, ret := dev.GetMemoryInfo(); ret != nvml.SUCCESS {
		problem("memory info", ret)
	} else {
		g.MemoryTotal, g.MemoryUsed = mem.Total, mem.Used
	}
	if g.Major, g.Minor, ret = dev.GetCudaComputeCapability(); ret != nvml.SUCCESS {
		problem("compute capability", ret)
	}
	if pci, ret := dev.GetPciInfo(); ret != nvml.SUCCESS {
		problem("pci info", ret)
	} else {
		g.PCIBusID = busID(pci)
	}
	// Optional readings: some GPUs and drivers do not support them, which is no fault.
	if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		g.UtilGPU, g.UtilMemory = int(u.Gpu), int(u.Memory)
	} else if !unsupported(ret) {
		problem("utilisation", ret)
	}
	if procs, ret := dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range procs {
			g.Processes = append(g.Processes, Process{PID: p.Pid, MemoryUsed: p.UsedGpuMemory})
		}
	} else if !unsupported(ret) {
		problem("running processes", ret)
	}
	inv.memoryHealth(dev, &g, problem)
	if xids := inv.xidProblems(g.UUID); len(xids) > 0 {
		g.Health.Healthy = false
		g.Health.Problems = append(g.Health.Problems, xids...)
	}
	return g
}

// memoryHealth checks the signs NVIDIA documents for a GPU whose memory needs a reset: on
// Ampere and later, a pending or failed row remap; on older GPUs, retired pages pending.
func (inv *Inventory) memoryHealth(dev nvml.Device, g *GPU, problem func(string, nvml.Return)) {
	_, _, pending, failed, ret := dev.GetRemappedRows()
	switch {
	case ret == nvml.SUCCESS:
		if failed {
			g.Health.Healthy = false
			g.Health.Problems = append(g.Health.Problems, "row remapping failed: the GPU needs service")
		}
		if pending {
			g.Health.Healthy = false
			g.Health.Problems = append(g.Health.Problems, "row remapping pending: the GPU needs a reset")
		}
		return
	case !unsupported(ret):
		problem("remapped rows", ret)
		return
	}
	state, ret := dev.GetRetiredPagesPendingStatus()
	switch {
	case ret == nvml.SUCCESS && state == nvml.FEATURE_ENABLED:
		g.Health.Healthy = false
		g.Health.Problems = append(g.Health.Problems, "retired pages pending: the GPU needs a reset")
	case ret != nvml.SUCCESS && !unsupported(ret):
		problem("retired pages", ret)
	}
}

func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// busID returns the PCI bus id in the sysfs form "0000:17:00.0" (NVML writes "00000000:17:00.0").
// A string that is not hex digits, ':' and '.' is not trusted; the numeric fields are used instead.
func busID(p nvml.PciInfo) string {
	n := 0
	for n < len(p.BusId) && p.BusId[n] != 0 {
		n++
	}
	s := strings.ToLower(string(p.BusId[:n]))
	if s == "" || strings.Trim(s, "0123456789abcdef:.") != "" {
		if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
			return ""
		}
		return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	if i := strings.IndexByte(s, ':'); i > 4 && strings.Trim(s[:i-4], "0") == "" {
		s = s[i-4:]
	}
	return s
}

package inventory

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Reading is what NVML says of one GPU now: what the guests' NVML (nvidia-smi in a VM) is told,
// within what the instance's tier allows. A value NVML does not report is -1 (counts) or 0
// (clocks).
type Reading struct {
	MemoryTotal, MemoryUsed uint64
	UtilGPU, UtilMemory     int
	// Clocks and MaxClocks are MHz: graphics, SM, memory, video.
	Clocks, MaxClocks    [4]uint32
	TemperatureC         int
	PowerMilliwatts      int
	PowerLimitMilliwatts int
	FanPercent           int
	PState               int // 0 (P0, most performance) to 15; -1 unknown
	PCIDeviceID          uint32
	// Simulated marks readings made up by the simulated backend (a test double), not a GPU's.
	Simulated bool
}

// Unread is a Reading with nothing read yet.
func Unread() Reading {
	return Reading{UtilGPU: -1, UtilMemory: -1, TemperatureC: -1, PowerMilliwatts: -1, PowerLimitMilliwatts: -1,
		FanPercent: -1, PState: -1}
}

var clockTypes = [4]nvml.ClockType{nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM, nvml.CLOCK_MEM, nvml.CLOCK_VIDEO}

// Read takes a Reading of the GPU with this UUID. Only a GPU that cannot be found or whose memory
// cannot be read is an error; the other readings are optional, as on GPUs that lack them.
func (inv *Inventory) Read(uuid string) (Reading, error) {
	r := Unread()
	dev, err := inv.device(uuid)
	if err != nil {
		return r, err
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return r, fmt.Errorf("inventory: GPU %q: memory info: %w", uuid, ret)
	}
	r.MemoryTotal, r.MemoryUsed = mem.Total, mem.Used
	if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		r.UtilGPU, r.UtilMemory = int(u.Gpu), int(u.Memory)
	}
	for i, ct := range clockTypes {
		if v, ret := dev.GetClockInfo(ct); ret == nvml.SUCCESS {
			r.Clocks[i] = v
		}
		if v, ret := dev.GetMaxClockInfo(ct); ret == nvml.SUCCESS {
			r.MaxClocks[i] = v
		}
	}
	if v, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		r.TemperatureC = int(v)
	}
	if v, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
		r.PowerMilliwatts = int(v)
	}
	if v, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		r.PowerLimitMilliwatts = int(v)
	}
	if v, ret := dev.GetFanSpeed(); ret == nvml.SUCCESS {
		r.FanPercent = int(v)
	}
	if v, ret := dev.GetPerformanceState(); ret == nvml.SUCCESS && v != nvml.PSTATE_UNKNOWN {
		r.PState = int(v)
	}
	if p, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		r.PCIDeviceID = p.PciDeviceId
	}
	return r, nil
}

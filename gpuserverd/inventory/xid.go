package inventory

import (
	"context"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// XIDEvent is a critical error NVML reported for a GPU: an Xid, as the kernel log names them.
type XIDEvent struct {
	UUID string
	XID  uint64
	// Hardware is true for the Xids that mean the GPU itself needs a reset or service; the rest
	// (e.g. 13, 31, 43: a kernel's fault) are caused by one program and say nothing of the GPU.
	Hardware bool
}

// hardwareXIDs are those NVIDIA's Xid catalogue attributes to the GPU rather than to a program:
// 48 double-bit ECC error, 62 internal micro-controller halt, 74 NVLink error, 79 fallen off the
// bus, 95 uncontained ECC error, 119/120 GSP timeout/error. A tenant cannot cause them at will, so
// marking the GPU unhealthy on them cannot be used to take GPUs away from other tenants.
var hardwareXIDs = []uint64{48, 62, 74, 79, 95, 119, 120}

// waitMillis bounds each NVML wait so a cancelled context is noticed within that time.
const waitMillis = 500

// WatchXIDs reports every Xid critical error NVML raises for any GPU until ctx ends, and marks a
// GPU with a hardware Xid unhealthy in later GPUs() readings (until ClearXIDs). GPUs that do not
// support the event are skipped. It returns ctx's error when ctx ends, or NVML's if it fails.
func (inv *Inventory) WatchXIDs(ctx context.Context, report func(XIDEvent)) error {
	set, ret := inv.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("inventory: create NVML event set: %w", ret)
	}
	defer set.Free()
	n, ret := inv.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("inventory: count GPUs: %w", ret)
	}
	watched := 0
	for i := 0; i < n; i++ {
		dev, ret := inv.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // read() reports it as unhealthy
		}
		switch ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); {
		case ret == nvml.SUCCESS:
			watched++
		case unsupported(ret):
		default:
			return fmt.Errorf("inventory: GPU %d: register Xid events: %w", i, ret)
		}
	}
	if watched == 0 {
		<-ctx.Done() // nothing to watch; still honour the contract of running until ctx ends
		return ctx.Err()
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(waitMillis)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret != nvml.SUCCESS:
			return fmt.Errorf("inventory: wait for NVML events: %w", ret)
		case data.EventType != nvml.EventTypeXidCriticalError || data.Device == nil:
			continue
		}
		uuid, ret := data.Device.GetUUID()
		if ret != nvml.SUCCESS {
			uuid = fmt.Sprintf("unknown (%v)", ret)
		}
		ev := XIDEvent{UUID: uuid, XID: data.EventData, Hardware: slices.Contains(hardwareXIDs, data.EventData)}
		if ev.Hardware {
			inv.mu.Lock()
			inv.faults[uuid] = append(inv.faults[uuid], ev.XID)
			inv.mu.Unlock()
		}
		report(ev)
	}
	return ctx.Err()
}

// ClearXIDs forgets the hardware Xids seen on a GPU (after an operator reset it).
func (inv *Inventory) ClearXIDs(uuid string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	delete(inv.faults, uuid)
}

func (inv *Inventory) xidProblems(uuid string) []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var out []string
	for _, x := range inv.faults[uuid] {
		out = append(out, fmt.Sprintf("hardware Xid %d seen: the GPU needs a reset or service", x))
	}
	return out
}

package server

import (
	"encoding/binary"
	"fmt"
	"slices"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/inventory"
	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// nvmlAnswer answers one monitoring request of the instance whose token is c. An error is a
// malformed request, which ends the connection.
func (s *Server) nvmlAnswer(c sessiontoken.Claims, t wire.Type, p []byte) (wire.Message, error) {
	switch t {
	case wire.TypeNvmlDevice:
		var m wire.NvmlDevice
		if err := m.Decode(p); err != nil {
			return nil, err
		}
		return s.nvmlDevice(c, m.Index), nil
	case wire.TypeNvmlProcesses:
		var m wire.NvmlProcesses
		if err := m.Decode(p); err != nil {
			return nil, err
		}
		return s.nvmlProcesses(c, m.Index), nil
	}
	return nil, fmt.Errorf("%w: %s is not an NVML request", wire.ErrDecode, t)
}

// granted is the device behind the guest's ordinal index of c, or false.
func (s *Server) granted(c sessiontoken.Claims, index uint32) (backend.Device, bool) {
	if index >= uint32(len(c.GPUs)) {
		return backend.Device{}, false
	}
	for _, d := range s.devices {
		if d.UUID == c.GPUs[index] {
			return d, true
		}
	}
	return backend.Device{}, false
}

// nvmlDevice is one GPU as the instance sees it. The shared tier sees its slice: memory total is
// the quota and memory used the instance's own sessions'; utilisation, clocks, temperature, power
// and the performance state are the whole GPU's, which shows other tenants' work, so they are not
// supported there. The dedicated tier sees the GPU.
func (s *Server) nvmlDevice(c sessiontoken.Claims, index uint32) *wire.NvmlDeviceReply {
	d, ok := s.granted(c, index)
	if !ok {
		return &wire.NvmlDeviceReply{Result: nvmlInvalidArgument}
	}
	out := &wire.NvmlDeviceReply{Name: truncate(d.Name, 96), UUID: d.UUID, PCIBusID: d.PCIBusID,
		Major: int32(d.Major), Minor: int32(d.Minor), MemoryTotal: d.TotalMemory,
		MemoryUsed: s.instanceBytes(d.Ordinal, c.InstanceID)}
	if c.Tier != sessiontoken.TierDedicated {
		if q := c.MemoryQuota; q > 0 {
			out.MemoryTotal = min(out.MemoryTotal, q)
		}
		out.MemoryUsed = min(out.MemoryUsed, out.MemoryTotal)
		return out
	}
	read := s.monitor().Read
	if read == nil {
		return out
	}
	r, err := read(d.UUID)
	if err != nil {
		s.log.Warn("NVML reading", "gpu", d.UUID, "err", err)
		return out
	}
	out.PCIDeviceID = r.PCIDeviceID
	if r.MemoryTotal > 0 {
		out.MemoryTotal, out.MemoryUsed = r.MemoryTotal, r.MemoryUsed
	}
	setReadings(out, r)
	return out
}

// setReadings copies what r reports into out and marks it supported.
func setReadings(out *wire.NvmlDeviceReply, r inventory.Reading) {
	if r.UtilGPU >= 0 && r.UtilMemory >= 0 {
		out.Supported |= wire.NvmlUtil
		out.UtilGpu, out.UtilMemory = uint32(r.UtilGPU), uint32(r.UtilMemory)
	}
	if r.Clocks != [4]uint32{} {
		out.Supported |= wire.NvmlClocks
		out.Clocks = append(r.Clocks[:], r.MaxClocks[:]...)
	}
	if r.TemperatureC >= 0 {
		out.Supported |= wire.NvmlTemperature
		out.Temperature = uint32(r.TemperatureC)
	}
	if r.PowerMilliwatts >= 0 && r.PowerLimitMilliwatts >= 0 {
		out.Supported |= wire.NvmlPower
		out.PowerMw, out.PowerLimitMw = uint32(r.PowerMilliwatts), uint32(r.PowerLimitMilliwatts)
	}
	if r.FanPercent >= 0 {
		out.Supported |= wire.NvmlFan
		out.FanPercent = uint32(r.FanPercent)
	}
	if r.PState >= 0 {
		out.Supported |= wire.NvmlPstate
		out.Pstate = uint32(r.PState)
	}
}

// nvmlProcesses lists the instance's own sessions on one GPU, never another instance's.
func (s *Server) nvmlProcesses(c sessiontoken.Claims, index uint32) *wire.NvmlProcessesReply {
	d, ok := s.granted(c, index)
	if !ok {
		return &wire.NvmlProcessesReply{Result: nvmlInvalidArgument}
	}
	out := &wire.NvmlProcessesReply{}
	for _, se := range s.sessionsOn(d.UUID, c.InstanceID) {
		if len(out.Pids) == 64 {
			break
		}
		se.mu.Lock()
		b, pid := se.last.DeviceBytes[d.Ordinal], se.last.GuestPID
		se.mu.Unlock()
		out.Pids = append(out.Pids, pid) // 0 from a guest that did not tell its pid
		out.Memory = binary.LittleEndian.AppendUint64(out.Memory, b)
	}
	return out
}

// sessionsOn lists the sessions holding the GPU, oldest first: all of them, or with instance
// set only that instance's.
func (s *Server) sessionsOn(uuid, instance string) []*session {
	s.mu.Lock()
	var out []*session
	for _, se := range s.sessions {
		if slices.Contains(se.claims.GPUs, uuid) && (instance == "" || se.claims.InstanceID == instance) {
			out = append(out, se)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *session) int { return a.start.Compare(b.start) })
	return out
}

// instanceBytes is the GPU memory the sessions hold on the device with this ordinal: all of them,
// or with instance set only that instance's.
func (s *Server) instanceBytes(ordinal int, instance string) uint64 {
	var n uint64
	for _, d := range s.devices {
		if d.Ordinal != ordinal {
			continue
		}
		for _, se := range s.sessionsOn(d.UUID, instance) {
			se.mu.Lock()
			n += se.last.DeviceBytes[ordinal]
			se.mu.Unlock()
		}
	}
	return n
}

// simulatedReading is the simulated backend's stand-in for NVML (a test double): memory as the
// sessions hold it, fixed clocks, temperature and power, and no fan, as on a data-centre GPU.
func (s *Server) simulatedReading(uuid string) (inventory.Reading, error) {
	r := inventory.Unread()
	r.Simulated = true
	for _, d := range s.devices {
		if d.UUID == uuid {
			r.MemoryTotal, r.MemoryUsed = d.TotalMemory, s.instanceBytes(d.Ordinal, "")
			r.UtilGPU, r.UtilMemory = 0, 0
			r.Clocks, r.MaxClocks = [4]uint32{1410, 1410, 1593, 1275}, [4]uint32{1980, 1980, 2619, 1755}
			r.TemperatureC, r.PowerMilliwatts, r.PowerLimitMilliwatts, r.PState = 35, 70000, 700000, 0
			return r, nil
		}
	}
	return r, fmt.Errorf("simulated GPU %q: %w", uuid, inventory.ErrNoGPU)
}

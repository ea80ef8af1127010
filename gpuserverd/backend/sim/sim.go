// Package sim is the simulated GPU backend: a TEST DOUBLE for machines without a GPU (CI,
// laptops). Device memory is host memory behind realistic-looking device addresses; copies,
// memsets and a few built-in kernels run on the CPU, deferred to one goroutine per stream so the
// ordering and synchronisation semantics of streams and events are the real ones.
//
// It registers the backend kind "simulated"; gpuserverd never picks it silently where a GPU exists.
package sim

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"gpucloud/gpuserverd/backend"
)

// Kind is the registered backend kind.
const Kind = "simulated"

// DriverVersion reported by the simulated driver (CUDA 12.4's encoding: 1000*major + 10*minor).
const DriverVersion = 12040

// DefaultMemory is each simulated device's memory.
const DefaultMemory = 16 << 30

func init() {
	backend.Register(Kind, func() (backend.Backend, error) {
		n := 1
		if s := os.Getenv("GPUSERVERD_SIM_DEVICES"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > 16 {
				return nil, fmt.Errorf("GPUSERVERD_SIM_DEVICES=%q: want a count from 1 to 16", s)
			}
			n = v
		}
		b := New(n, DefaultMemory)
		// Several simulated GPU servers under one control plane (a drain's test) need GPUs of
		// their own: GPUSERVERD_SIM_UUID_OFFSET numbers this server's from UUID(offset).
		if s := os.Getenv("GPUSERVERD_SIM_UUID_OFFSET"); s != "" {
			off, err := strconv.Atoi(s)
			if err != nil || off < 0 || off > 1<<20 {
				return nil, fmt.Errorf("GPUSERVERD_SIM_UUID_OFFSET=%q: want a number from 0 to %d", s, 1<<20)
			}
			for i := range b.devices {
				b.devices[i].UUID = UUID(off + i)
			}
		}
		return b, nil
	})
}

// UUID is the fixed UUID of simulated device i, so tests can name it in tokens.
func UUID(i int) string { return fmt.Sprintf("GPU-51a10000-0000-4000-8000-%012d", i) }

// Backend is a set of simulated devices.
type Backend struct {
	devices []backend.Device

	mu   sync.Mutex
	used []uint64 // bytes allocated per device, across contexts
}

// New returns a backend with n devices of memBytes each.
func New(n int, memBytes uint64) *Backend {
	b := &Backend{used: make([]uint64, n)}
	for i := range n {
		b.devices = append(b.devices, backend.Device{
			Ordinal: i, Name: "Simulated GPU (test double)", UUID: UUID(i),
			TotalMemory: memBytes, Major: 9, Minor: 0,
			PCIBusID: fmt.Sprintf("00000000:%02x:00.0", 0x10+i),
		})
	}
	return b
}

func (b *Backend) Kind() string                  { return Kind }
func (b *Backend) DriverVersion() (int32, error) { return DriverVersion, nil }
func (b *Backend) Devices() ([]backend.Device, error) {
	return append([]backend.Device(nil), b.devices...), nil
}

func (b *Backend) device(ordinal int) (backend.Device, error) {
	if ordinal < 0 || ordinal >= len(b.devices) {
		return backend.Device{}, fmt.Errorf("device %d of %d: %w", ordinal, len(b.devices), backend.ErrInvalidDevice)
	}
	return b.devices[ordinal], nil
}

// attributes modelled on an H100; attributes not listed read 0. Unlike an H100 on PCIe, the
// simulated device's atomics on host memory are the CPU's (86, HOST_NATIVE_ATOMIC_SUPPORTED: its
// kernels run on the worker's CPU), so a guest over shared memory keeps managed memory in the arena.
var attributes = map[int32]int32{
	1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2147483647, 6: 65535, 7: 65535, 8: 49152, 9: 65536,
	10: 32, 11: 2147483647, 12: 65536, 13: 1980000, 14: 512, 15: 1, 16: 132, 31: 1, 36: 2619000,
	37: 5120, 38: 52428800, 39: 2048, 40: 2, 41: 1, 75: 9, 76: 0, 81: 233472, 82: 65536, 86: 1, 97: 227328,
}

// maxAttribute is one past the highest CUdevice_attribute the simulator accepts.
const maxAttribute = 150

func (b *Backend) DeviceAttribute(ordinal int, attr int32) (int32, error) {
	d, err := b.device(ordinal)
	if err != nil {
		return 0, err
	}
	if attr <= 0 || attr >= maxAttribute {
		return 0, fmt.Errorf("device attribute %d: %w", attr, backend.ErrInvalidValue)
	}
	switch attr {
	case 33: // PCI bus id
		return int32(0x10 + d.Ordinal), nil
	case 75:
		return int32(d.Major), nil
	case 76:
		return int32(d.Minor), nil
	}
	return attributes[attr], nil
}

// reserve accounts bytes on a device, failing with out-of-memory past its capacity.
func (b *Backend) reserve(ordinal int, bytes uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bytes > b.devices[ordinal].TotalMemory-b.used[ordinal] { // no overflow for any bytes
		return backend.ErrOutOfMemory
	}
	b.used[ordinal] += bytes
	return nil
}

func (b *Backend) release(ordinal int, bytes uint64) {
	b.mu.Lock()
	b.used[ordinal] -= bytes
	b.mu.Unlock()
}

func (b *Backend) free(ordinal int) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.devices[ordinal].TotalMemory - b.used[ordinal]
}

func (b *Backend) NewContext(ordinal int) (backend.Context, error) {
	if _, err := b.device(ordinal); err != nil {
		return nil, err
	}
	return newContext(b, ordinal), nil
}

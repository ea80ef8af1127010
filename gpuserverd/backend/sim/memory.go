package sim

import (
	"fmt"
	"sort"
	"sync"

	"gpucloud/gpuserverd/backend"
)

// Device addresses look like a real GPU's (high canonical addresses, 2 MiB-aligned blocks per
// device) so guest code that prints or compares pointers sees realistic values.
const (
	addressBase  = 0x7f2c_0000_0000
	deviceStride = 0x0100_0000_0000
	alignment    = 512
)

type allocation struct {
	base uint64
	data []byte
	// mapped: a virtual-memory mapping of a physical allocation (vmm.go), not freed by MemFree
	// and readable only once access is set.
	mapped, access bool
}

// memory is a context's device allocations; stream goroutines read it, so it is locked.
type memory struct {
	mu    sync.Mutex
	next  uint64
	bases []uint64 // sorted
	alloc map[uint64]*allocation
	used  uint64
}

func newMemory(ordinal int) *memory {
	return &memory{next: addressBase + uint64(ordinal)*deviceStride, alloc: map[uint64]*allocation{}}
}

func (m *memory) add(bytes uint64) uint64 {
	base := m.place(&allocation{data: make([]byte, bytes)})
	m.mu.Lock()
	m.used += bytes
	m.mu.Unlock()
	return base
}

// place gives a the next free address and adds it, without counting it in used.
func (m *memory) place(a *allocation) uint64 {
	m.mu.Lock()
	a.base = m.next
	m.next += (uint64(len(a.data)) + alignment - 1) / alignment * alignment
	if len(a.data) == 0 {
		m.next += alignment
	}
	m.mu.Unlock()
	m.insert(a)
	return a.base
}

// placeRange gives a an address range of size bytes (its data may be shorter, even empty).
func (m *memory) placeRange(a *allocation, size uint64) {
	m.mu.Lock()
	a.base = m.next
	m.next += (max(size, 1) + alignment - 1) / alignment * alignment
	m.mu.Unlock()
	m.insert(a)
}

// setData puts memory behind (or takes it from) an allocation's range.
func (m *memory) setData(a *allocation, data []byte) {
	m.mu.Lock()
	a.data = data
	m.mu.Unlock()
}

func (m *memory) remove(ptr uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.alloc[ptr]
	if !ok || a.mapped {
		return 0, fmt.Errorf("free of %#x, not an allocation's start: %w", ptr, backend.ErrInvalidValue)
	}
	delete(m.alloc, ptr)
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] >= ptr })
	m.bases = append(m.bases[:i], m.bases[i+1:]...)
	m.used -= uint64(len(a.data))
	return uint64(len(a.data)), nil
}

// view returns the device bytes [ptr, ptr+n), which must lie inside one allocation.
func (m *memory) view(ptr, n uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > ptr }) - 1
	if i >= 0 {
		a := m.alloc[m.bases[i]]
		off := ptr - a.base
		if a.mapped && !a.access && off < uint64(len(a.data)) {
			return nil, fmt.Errorf("device range [%#x, +%d) is mapped without access: %w", ptr, n, backend.ErrIllegalAddress)
		}
		if off <= uint64(len(a.data)) && n <= uint64(len(a.data))-off {
			return a.data[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("device range [%#x, +%d) is not allocated: %w", ptr, n, backend.ErrInvalidValue)
}

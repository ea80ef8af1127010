package sim

import (
	"fmt"
	"os"
	"sort"

	"gpucloud/gpuserverd/backend"
)

// granularity is the simulated device's allocation granularity (an H100's, minimum and
// recommended alike).
const granularity = 2 << 20

// physical is a cuMemCreate allocation: its bytes, and the references that keep them (the
// handle, each retain, each mapping).
type physical struct {
	props backend.AllocProps
	data  []byte
	refs  int
	// imported: opened from another process's export (ipc.go), reserved on its device there.
	imported bool
}

type mapping struct {
	base, size uint64
	handle     backend.Handle
}

func aligned(v uint64) bool { return v%granularity == 0 }

func (c *Context) MemAddressReserve(size, alignment, addr, flags uint64) (uint64, error) {
	if size == 0 || !aligned(size) || (alignment != 0 && (alignment&(alignment-1) != 0)) || flags != 0 {
		return 0, fmt.Errorf("reserve %d bytes (alignment %d, flags %d): size a multiple of %d, alignment a power of two: %w",
			size, alignment, flags, granularity, backend.ErrInvalidValue)
	}
	alignment = max(alignment, granularity)
	c.mem.mu.Lock()
	base := (c.mem.next + alignment - 1) / alignment * alignment
	c.mem.next = base + size
	c.mem.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fam.reservations == nil {
		c.fam.reservations = map[uint64]uint64{}
	}
	c.fam.reservations[base] = size // the hint addr is a hint: this simulator never honours it
	return base, nil
}

func (c *Context) MemAddressFree(ptr, size uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.fam.reservations[ptr]; !ok || s != size {
		return fmt.Errorf("free of [%#x, +%d): not a reservation: %w", ptr, size, backend.ErrInvalidValue)
	}
	for _, m := range c.fam.mappings {
		if m.base >= ptr && m.base < ptr+size {
			return fmt.Errorf("free of reservation %#x with %#x still mapped: %w", ptr, m.base, backend.ErrInvalidValue)
		}
	}
	delete(c.fam.reservations, ptr)
	return nil
}

func (c *Context) MemCreate(p backend.AllocProps, flags uint64) (backend.Handle, error) {
	if p.Type != 1 || p.LocationType != 1 || p.LocationID != 0 || flags != 0 {
		return 0, fmt.Errorf("create: pinned memory on the context's device only (type %d, location %d/%d): %w",
			p.Type, p.LocationType, p.LocationID, backend.ErrInvalidValue)
	}
	if p.Size == 0 || !aligned(p.Size) {
		return 0, fmt.Errorf("create %d bytes: not a multiple of the granularity %d: %w", p.Size, granularity, backend.ErrInvalidValue)
	}
	if err := c.b.reserve(c.ordinal, p.Size); err != nil {
		return 0, fmt.Errorf("create %d bytes: %w", p.Size, err)
	}
	data := make([]byte, p.Size)
	var shared *os.File
	if p.HandleTypes&1 != 0 { // exportable as a POSIX file descriptor: its bytes live in a memfd (ipc.go)
		f, b, err := sharedBytes("gpucloud-sim-vmm", p.Size)
		if err != nil {
			c.b.release(c.ordinal, p.Size)
			return 0, err
		}
		data, shared = b, f
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fam.physical == nil {
		c.fam.physical = map[backend.Handle]*physical{}
	}
	h := c.handle()
	c.fam.physical[h] = &physical{props: p, data: data, refs: 1}
	if shared != nil {
		if c.fam.ipc.files == nil {
			c.fam.ipc.files = map[uint64]*os.File{}
		}
		c.fam.ipc.files[uint64(h)] = shared
	}
	return h, nil
}

// unref drops one reference to a physical allocation, freeing it with the last. c.mu held.
func (c *Context) unref(h backend.Handle) {
	p := c.fam.physical[h]
	if p.refs--; p.refs == 0 {
		delete(c.fam.physical, h)
		if !p.imported {
			c.b.release(c.ordinal, uint64(len(p.data)))
		}
	}
}

func (c *Context) MemRelease(h backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fam.physical[h]; !ok {
		return fmt.Errorf("release of allocation %d: %w", h, backend.ErrInvalidHandle)
	}
	c.unref(h)
	return nil
}

// reservedRange tells whether [ptr, ptr+size) lies inside one reservation. c.mu held.
func (c *Context) reservedRange(ptr, size uint64) bool {
	for b, s := range c.fam.reservations {
		if ptr >= b && size <= s && ptr-b <= s-size {
			return true
		}
	}
	return false
}

func (c *Context) MemMap(ptr, size, offset uint64, h backend.Handle, flags uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.fam.physical[h]
	if !ok {
		return fmt.Errorf("map of allocation %d: %w", h, backend.ErrInvalidHandle)
	}
	if flags != 0 || size == 0 || !aligned(size) || !aligned(offset) || offset > uint64(len(p.data)) ||
		size > uint64(len(p.data))-offset || !c.reservedRange(ptr, size) {
		return fmt.Errorf("map [%#x, +%d) at offset %d of a %d-byte allocation: %w", ptr, size, offset, len(p.data), backend.ErrInvalidValue)
	}
	for _, m := range c.fam.mappings {
		if ptr < m.base+m.size && m.base < ptr+size {
			return fmt.Errorf("map [%#x, +%d): overlaps the mapping at %#x: %w", ptr, size, m.base, backend.ErrInvalidValue)
		}
	}
	if c.fam.mappings == nil {
		c.fam.mappings = map[uint64]*mapping{}
	}
	c.fam.mappings[ptr] = &mapping{base: ptr, size: size, handle: h}
	p.refs++
	c.mem.insert(&allocation{base: ptr, data: p.data[offset : offset+size], mapped: true})
	return nil
}

func (c *Context) MemUnmap(ptr, size uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var in []*mapping
	covered := uint64(0)
	for _, m := range c.fam.mappings {
		if m.base >= ptr && m.base-ptr < size {
			if m.size > size-(m.base-ptr) {
				return fmt.Errorf("unmap [%#x, +%d) cuts the mapping at %#x: %w", ptr, size, m.base, backend.ErrInvalidValue)
			}
			in, covered = append(in, m), covered+m.size
		}
	}
	if covered != size || len(in) == 0 {
		return fmt.Errorf("unmap [%#x, +%d): not wholly mapped: %w", ptr, size, backend.ErrInvalidValue)
	}
	for _, m := range in {
		delete(c.fam.mappings, m.base)
		c.mem.drop(m.base)
		c.unref(m.handle)
	}
	return nil
}

func (c *Context) MemSetAccess(ptr, size uint64, locType uint32, locID int32, flags uint32) error {
	if locType != 1 || locID != 0 || flags > 3 || flags == 2 {
		return fmt.Errorf("access for location %d/%d, flags %d: %w", locType, locID, flags, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var in []uint64
	covered := uint64(0)
	for _, m := range c.fam.mappings {
		if m.base >= ptr && m.base-ptr < size {
			in, covered = append(in, m.base), covered+m.size
		}
	}
	if covered != size {
		return fmt.Errorf("set access on [%#x, +%d): not wholly mapped: %w", ptr, size, backend.ErrInvalidValue)
	}
	c.mem.mu.Lock()
	for _, b := range in {
		c.mem.alloc[b].access = flags != 0
	}
	c.mem.mu.Unlock()
	return nil
}

func (c *Context) MemGetAllocationGranularity(p backend.AllocProps, option uint32) (uint64, error) {
	if p.LocationType != 1 || p.LocationID != 0 || option > 1 {
		return 0, fmt.Errorf("granularity for location %d/%d, option %d: %w", p.LocationType, p.LocationID, option, backend.ErrInvalidValue)
	}
	return granularity, nil
}

func (c *Context) MemGetAllocationProperties(h backend.Handle) (backend.AllocProps, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.fam.physical[h]
	if !ok {
		return backend.AllocProps{}, fmt.Errorf("properties of allocation %d: %w", h, backend.ErrInvalidHandle)
	}
	return p.props, nil
}

func (c *Context) MemRetainAllocationHandle(ptr uint64) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.fam.mappings {
		if ptr >= m.base && ptr-m.base < m.size {
			c.fam.physical[m.handle].refs++
			return m.handle, nil
		}
	}
	return 0, fmt.Errorf("retain: %#x is not mapped: %w", ptr, backend.ErrInvalidValue)
}

// insert adds a mapping's bytes at a. They count in no allocation's total (MemCreate charged them).
func (m *memory) insert(a *allocation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alloc[a.base] = a
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > a.base })
	m.bases = append(m.bases, 0)
	copy(m.bases[i+1:], m.bases[i:])
	m.bases[i] = a.base
}

// drop removes what insert added.
func (m *memory) drop(base uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.alloc, base)
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] >= base })
	m.bases = append(m.bases[:i], m.bases[i+1:]...)
}

package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// pool is a memory pool. Its memory is reserved from the device as allocations need it and given
// back, as a real pool does, when frees leave more reserved than the release threshold (at once
// here: the simulator has no synchronisation point to wait for) or when trimmed.
type pool struct {
	props                  backend.PoolProps
	reserved, used         uint64
	reservedHigh, usedHigh uint64
	threshold              uint64
	reuse                  [3]uint64 // CU_MEMPOOL_ATTR_REUSE_* (1..3), each 0 or 1
}

type asyncAlloc struct {
	pool  backend.Handle
	bytes uint64
}

// CUmemPool_attribute numbers.
const (
	poolReleaseThreshold = 4
	poolReservedCurrent  = 5
	poolReservedHigh     = 6
	poolUsedCurrent      = 7
	poolUsedHigh         = 8
)

func newPool(p backend.PoolProps) *pool { return &pool{props: p, reuse: [3]uint64{1, 1, 1}} }

// poolLocked returns pool h, h 0 being the current pool (created with the default on first use).
// c.mu held.
func (c *Context) poolLocked(h backend.Handle) (backend.Handle, *pool, error) {
	if c.fam.pools == nil {
		c.fam.pools = map[backend.Handle]*pool{}
	}
	if c.fam.defaultPool == 0 {
		c.fam.defaultPool = c.handle()
		c.fam.pools[c.fam.defaultPool] = newPool(backend.PoolProps{AllocType: 1, LocationType: 1})
		c.fam.currentPool = c.fam.defaultPool
	}
	if h == 0 {
		h = c.fam.currentPool
	}
	p, ok := c.fam.pools[h]
	if !ok {
		return 0, nil, fmt.Errorf("memory pool %d: %w", h, backend.ErrInvalidHandle)
	}
	return h, p, nil
}

// namedPoolLocked is pool h, which a call must name (0 is no pool). c.mu held.
func (c *Context) namedPoolLocked(h backend.Handle) (*pool, error) {
	if h == 0 {
		return nil, fmt.Errorf("pool 0: %w", backend.ErrInvalidHandle)
	}
	_, p, err := c.poolLocked(h)
	return p, err
}

// release gives back what the pool holds past keep (and past its used bytes). c.mu held.
func (c *Context) shrink(p *pool, keep uint64) {
	keep = max(keep, p.used)
	if p.reserved > keep {
		c.b.release(c.ordinal, p.reserved-keep)
		p.reserved = keep
	}
}

func (c *Context) MemAllocAsync(bytes uint64, stream, ph backend.Handle) (uint64, error) {
	if bytes == 0 {
		return 0, fmt.Errorf("stream-ordered allocation of 0 bytes: %w", backend.ErrInvalidValue)
	}
	if _, err := c.stream(stream); err != nil {
		return 0, err
	}
	if ptr, ok, err := c.captureAlloc(stream, bytes); ok {
		return ptr, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ph, p, err := c.poolLocked(ph)
	if err != nil {
		return 0, err
	}
	if p.used+bytes < p.used || (p.props.MaxSize > 0 && p.used+bytes > p.props.MaxSize) {
		return 0, fmt.Errorf("pool %d: %d bytes past its maximum %d: %w", ph, bytes, p.props.MaxSize, backend.ErrOutOfMemory)
	}
	if grow := p.used + bytes; grow > p.reserved {
		if err := c.b.reserve(c.ordinal, grow-p.reserved); err != nil {
			return 0, fmt.Errorf("pool %d: allocate %d bytes: %w", ph, bytes, err)
		}
		p.reserved = grow
	}
	p.used += bytes
	p.usedHigh, p.reservedHigh = max(p.usedHigh, p.used), max(p.reservedHigh, p.reserved)
	ptr := c.mem.place(&allocation{data: make([]byte, bytes), mapped: true, access: true})
	if c.fam.asyncAllocs == nil {
		c.fam.asyncAllocs = map[uint64]asyncAlloc{}
	}
	c.fam.asyncAllocs[ptr] = asyncAlloc{pool: ph, bytes: bytes}
	return ptr, nil
}

// MemFreeAsync frees once the stream reaches the call: work queued before it may still use the memory.
func (c *Context) MemFreeAsync(ptr uint64, stream backend.Handle) (uint64, error) {
	s, err := c.stream(stream)
	if err != nil {
		return 0, err
	}
	if ok, err := c.freeGraphAlloc(ptr, stream, false); ok {
		return 0, err
	}
	c.mu.Lock()
	a, ok := c.fam.asyncAllocs[ptr]
	delete(c.fam.asyncAllocs, ptr)
	c.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("stream-ordered free of %#x: not a stream-ordered allocation: %w", ptr, backend.ErrInvalidValue)
	}
	c.enqueue(stream, s, func() {
		c.mem.drop(ptr)
		c.mu.Lock()
		defer c.mu.Unlock()
		if p, ok := c.fam.pools[a.pool]; ok {
			p.used -= a.bytes
			c.shrink(p, p.threshold)
		}
	})
	return a.bytes, nil
}

func (c *Context) MemPoolCreate(pp backend.PoolProps) (backend.Handle, error) {
	if pp.AllocType != 1 || pp.LocationType != 1 || pp.LocationID != 0 {
		return 0, fmt.Errorf("pool of type %d at location %d/%d: pinned, on the context's device: %w",
			pp.AllocType, pp.LocationType, pp.LocationID, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, _, err := c.poolLocked(0); err != nil {
		return 0, err
	}
	h := c.handle()
	c.fam.pools[h] = newPool(pp)
	return h, nil
}

func (c *Context) MemPoolDestroy(ph backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ph == 0 || ph == c.fam.defaultPool {
		return fmt.Errorf("destroy of pool %d (the default pool cannot be): %w", ph, backend.ErrInvalidValue)
	}
	_, p, err := c.poolLocked(ph)
	if err != nil {
		return err
	}
	// Like the driver, outstanding allocations keep their memory until freed; the pool goes.
	c.shrink(p, 0)
	delete(c.fam.pools, ph)
	if c.fam.currentPool == ph {
		c.fam.currentPool = c.fam.defaultPool
	}
	return nil
}

func (c *Context) MemPoolSetAttribute(ph backend.Handle, attr int32, v uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.namedPoolLocked(ph)
	if err != nil {
		return err
	}
	switch attr {
	case 1, 2, 3:
		if v > 1 {
			return fmt.Errorf("pool attribute %d = %d (0 or 1): %w", attr, v, backend.ErrInvalidValue)
		}
		p.reuse[attr-1] = v
	case poolReleaseThreshold:
		p.threshold = v
	case poolReservedHigh, poolUsedHigh:
		if v != 0 {
			return fmt.Errorf("pool attribute %d can only be reset to 0: %w", attr, backend.ErrInvalidValue)
		}
		if attr == poolReservedHigh {
			p.reservedHigh = p.reserved
		} else {
			p.usedHigh = p.used
		}
	default:
		return fmt.Errorf("pool attribute %d cannot be set: %w", attr, backend.ErrInvalidValue)
	}
	return nil
}

func (c *Context) MemPoolGetAttribute(ph backend.Handle, attr int32) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.namedPoolLocked(ph)
	if err != nil {
		return 0, err
	}
	switch attr {
	case 1, 2, 3:
		return p.reuse[attr-1], nil
	case poolReleaseThreshold:
		return p.threshold, nil
	case poolReservedCurrent:
		return p.reserved, nil
	case poolReservedHigh:
		return p.reservedHigh, nil
	case poolUsedCurrent:
		return p.used, nil
	case poolUsedHigh:
		return p.usedHigh, nil
	}
	return 0, fmt.Errorf("pool attribute %d: %w", attr, backend.ErrInvalidValue)
}

func (c *Context) MemPoolTrimTo(ph backend.Handle, minBytes uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.namedPoolLocked(ph)
	if err != nil {
		return err
	}
	c.shrink(p, minBytes)
	return nil
}

func (c *Context) DefaultMemPool() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _, err := c.poolLocked(0)
	return c.fam.defaultPool, err
}

func (c *Context) CurrentMemPool() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, _, err := c.poolLocked(0)
	return h, err
}

func (c *Context) SetMemPool(ph backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.namedPoolLocked(ph); err != nil {
		return err
	}
	c.fam.currentPool = ph
	return nil
}

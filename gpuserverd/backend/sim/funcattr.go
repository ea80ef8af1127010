package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// Function attributes a program may set, modelled on an H100: a kernel launches with at most
// 48 KiB of dynamic shared memory unless it raised its limit (up to the opt-in maximum).
const (
	attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	attrCarveout         = 9 // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT

	defaultDynamicShared = 49152
	optinDynamicShared   = 227328 // device attribute 97
	sharedPerSM          = 233472 // device attribute 81
	reservedPerBlock     = 1024   // the shared memory the driver keeps per block
	maxBlocksPerSM       = 32
	maxWarpsPerSM        = 64
	regsPerSM            = 65536
	simRegsPerThread     = 32 // what FuncGetAttribute reports for every simulated kernel
)

// funcAttrs is what a program set on one function.
type funcAttrs struct {
	maxDynamicShared int32
	carveout         int32
}

// attrsLocked is h's settable attributes. Caller holds c.mu.
func (c *Context) attrsLocked(h backend.Handle) funcAttrs {
	if a, ok := c.funcAttrs[h]; ok {
		return a
	}
	return funcAttrs{maxDynamicShared: defaultDynamicShared, carveout: -1}
}

func (c *Context) settable(h backend.Handle, attr int32) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.attrsLocked(h)
	switch attr {
	case attrMaxDynamicShared:
		return a.maxDynamicShared, true
	case attrCarveout:
		return a.carveout, true
	}
	return 0, false
}

// FuncSetAttribute is cuFuncSetAttribute; only the attributes NVIDIA documents as settable are.
func (c *Context) FuncSetAttribute(h backend.Handle, attr, value int32) error {
	if _, err := c.function(h); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.attrsLocked(h)
	switch attr {
	case attrMaxDynamicShared:
		if value < 0 || value > optinDynamicShared {
			return fmt.Errorf("max dynamic shared memory %d outside [0, %d]: %w", value, optinDynamicShared, backend.ErrInvalidValue)
		}
		a.maxDynamicShared = value
	case attrCarveout:
		if value < -1 || value > 100 {
			return fmt.Errorf("shared memory carveout %d outside [-1, 100]: %w", value, backend.ErrInvalidValue)
		}
		a.carveout = value
	default:
		return fmt.Errorf("function attribute %d is not settable: %w", attr, backend.ErrInvalidValue)
	}
	if c.funcAttrs == nil {
		c.funcAttrs = map[backend.Handle]funcAttrs{}
	}
	c.funcAttrs[h] = a
	return nil
}

// checkShared refuses a launch asking for more dynamic shared memory than the function allows.
func (c *Context) checkShared(h backend.Handle, name string, shared uint32) error {
	limit, _ := c.settable(h, attrMaxDynamicShared)
	if int64(shared) > int64(limit) {
		return fmt.Errorf("launch %s with %d bytes of dynamic shared memory, limit %d (cuFuncSetAttribute raises it): %w",
			name, shared, limit, backend.ErrInvalidValue)
	}
	return nil
}

// OccupancyMaxActiveBlocks is cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags on the
// simulated H100: the fewest blocks any of threads, registers, shared memory and the block limit
// allow on one multiprocessor.
func (c *Context) OccupancyMaxActiveBlocks(h backend.Handle, blockSize int32, dynamicShared uint64, flags uint32) (int32, error) {
	if _, err := c.function(h); err != nil {
		return 0, err
	}
	if blockSize <= 0 {
		return 0, fmt.Errorf("occupancy for block size %d: %w", blockSize, backend.ErrInvalidValue)
	}
	if flags > 1 { // CU_OCCUPANCY_DEFAULT, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE
		return 0, fmt.Errorf("occupancy flags %#x: %w", flags, backend.ErrInvalidValue)
	}
	limit, _ := c.settable(h, attrMaxDynamicShared)
	if blockSize > 1024 || dynamicShared > uint64(limit) {
		return 0, nil // such a block cannot launch at all
	}
	warps := (blockSize + 31) / 32
	blocks := int32(maxBlocksPerSM)
	blocks = min(blocks, maxWarpsPerSM/warps)
	blocks = min(blocks, regsPerSM/(warps*32*simRegsPerThread))
	if dynamicShared > 0 {
		blocks = min(blocks, int32(sharedPerSM/(dynamicShared+reservedPerBlock)))
	}
	return blocks, nil
}

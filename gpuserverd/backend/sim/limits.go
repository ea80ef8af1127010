package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// Context limits (CUlimit) the simulator keeps, with an H100's defaults. Values are kept as set:
// nothing simulated uses them, but a program reads back what it asked for.
var limitDefaults = map[int32]uint64{
	0: 1024,    // CU_LIMIT_STACK_SIZE
	1: 1 << 20, // CU_LIMIT_PRINTF_FIFO_SIZE
	2: 8 << 20, // CU_LIMIT_MALLOC_HEAP_SIZE
	3: 2,       // CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH
	4: 2048,    // CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT
	5: 64,      // CU_LIMIT_MAX_L2_FETCH_GRANULARITY
	6: 0,       // CU_LIMIT_PERSISTING_L2_CACHE_SIZE
}

func (c *Context) SetLimit(limit int32, value uint64) error {
	if _, ok := limitDefaults[limit]; !ok {
		return fmt.Errorf("limit %d: %w", limit, backend.ErrUnsupportedLimit)
	}
	if limit == 5 && value != 0 && value != 32 && value != 64 && value != 128 {
		return fmt.Errorf("L2 fetch granularity %d (0, 32, 64 or 128): %w", value, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limits == nil {
		c.limits = map[int32]uint64{}
	}
	c.limits[limit] = value
	return nil
}

func (c *Context) Limit(limit int32) (uint64, error) {
	def, ok := limitDefaults[limit]
	if !ok {
		return 0, fmt.Errorf("limit %d: %w", limit, backend.ErrUnsupportedLimit)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.limits[limit]; ok {
		return v, nil
	}
	return def, nil
}

// SetCacheConfig keeps a CUfunc_cache preference (0 none, 1 shared, 2 L1, 3 equal).
func (c *Context) SetCacheConfig(config int32) error {
	if config < 0 || config > 3 {
		return fmt.Errorf("cache configuration %d: %w", config, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cacheConfig = config
	return nil
}

func (c *Context) CacheConfig() (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cacheConfig, nil
}

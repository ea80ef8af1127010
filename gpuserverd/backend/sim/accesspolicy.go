package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// StreamSetAccessPolicy checks and keeps a stream's access-policy window, as NVIDIA's driver
// checks it (a hit ratio in [0, 1], properties normal, streaming or persisting); the simulated
// device has no L2 for it to shape.
func (c *Context) StreamSetAccessPolicy(h backend.Handle, w backend.AccessPolicyWindow) error {
	if !(w.HitRatio >= 0 && w.HitRatio <= 1) || w.HitProp > 2 || w.MissProp > 2 {
		return fmt.Errorf("access-policy window: hit ratio %g, properties %d and %d: %w", w.HitRatio, w.HitProp, w.MissProp, backend.ErrInvalidValue)
	}
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	c.mu.Lock()
	s.window = w
	c.mu.Unlock()
	return nil
}

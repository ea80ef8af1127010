package sim

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

var _ backend.HostMapper = (*Context)(nil)

// HostDevicePointer maps a registered host range into the simulated device's address space, as
// a GPU maps registered (device-mapped) memory: kernels and copies at the returned address read
// and write the host's bytes themselves. The mapping lasts until the range is unregistered.
func (c *Context) HostDevicePointer(buf []byte) (uint64, error) {
	c.mu.Lock()
	n, ok := c.reg[unsafe.SliceData(buf)]
	if !ok || n != len(buf) {
		c.mu.Unlock()
		return 0, fmt.Errorf("sim: host range %p+%d is not registered: %w", unsafe.SliceData(buf), len(buf), backend.ErrInvalidValue)
	}
	if base, ok := c.hostMapped[unsafe.SliceData(buf)]; ok {
		c.mu.Unlock()
		return base, nil
	}
	c.mu.Unlock()
	base := c.mem.place(&allocation{data: buf, mapped: true, access: true})
	c.mu.Lock()
	if c.hostMapped == nil {
		c.hostMapped = map[*byte]uint64{}
	}
	c.hostMapped[unsafe.SliceData(buf)] = base
	c.mu.Unlock()
	return base, nil
}

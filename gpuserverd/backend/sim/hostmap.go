package sim

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

var _ backend.HostMapper = (*Context)(nil)

// hostPage aligns mapped host memory (64 KiB: any host page size up to it).
const hostPage = 64 << 10

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
	// Page-aligned, as a GPU maps host pages: a guest maps the arena at this address (managed
	// memory), which mmap needs aligned.
	c.mem.mu.Lock()
	c.mem.next = (c.mem.next + hostPage - 1) &^ (hostPage - 1)
	c.mem.mu.Unlock()
	base := c.mem.place(&allocation{data: buf, mapped: true, access: true})
	c.mu.Lock()
	if c.hostMapped == nil {
		c.hostMapped = map[*byte]uint64{}
	}
	c.hostMapped[unsafe.SliceData(buf)] = base
	c.mu.Unlock()
	return base, nil
}

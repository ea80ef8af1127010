package cuda

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"gpucloud/gpuserverd/backend"
)

// Globals the driver placed (a cubin's or fat binary's, every __constant__, PTX the pinning does
// not take: pinned.go) come back elsewhere after a restore, and a fresh load gives them their
// initial values. A program that never asked where one lives cannot tell where it is, but it
// would see the state its kernels kept there lost. So an image carries each one's contents by
// name (found in the module's image: globalnames.go), read while the session is idle, and a
// restore writes them wherever the new load put them. A module whose globals cannot be named is
// refused, naming it.

// maxGlobalContents bounds the driver-placed globals' bytes an image carries: they travel in its
// JSON record, not with the memory.
const maxGlobalContents = 256 << 20

// driverGlobalContents reads the globals of module h the driver placed, by name (nil when it has
// none); left is what maxGlobalContents leaves for them, less what they take.
func (c *Context) driverGlobalContents(h backend.Handle, m *module, left *uint64) (map[string][]byte, error) {
	if !m.named {
		m.names, m.namesErr = moduleGlobalNames(m.image)
		m.named = true
	}
	if m.namesErr != nil {
		return nil, fmt.Errorf("module %d: gpuserverd cannot name the globals the driver placed for it, whose contents a restore would lose (%v)", h, m.namesErr)
	}
	names := m.names
	var out map[string][]byte
	for _, name := range names {
		if _, ok := m.pinned[name]; ok {
			continue // among the regions
		}
		p, n, err := c.rawGlobal(m.ptr, name)
		if errors.Is(err, backend.ErrNotFound) {
			continue // another GPU's cubin in the fat binary, or a name the driver does not export
		}
		if err != nil {
			return nil, fmt.Errorf("module %d global %q: %w", h, name, err)
		}
		if n > *left {
			return nil, fmt.Errorf("module %d: its driver-placed globals take more than the %d bytes an image carries of them (global %q: %d bytes)",
				h, maxGlobalContents, name, n)
		}
		*left -= n
		b := make([]byte, n)
		if n > 0 {
			if err := c.MemcpyDtoH(b, p, 0, false); err != nil {
				return nil, fmt.Errorf("module %d global %q: reading it: %w", h, name, err)
			}
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = b
	}
	return out, nil
}

// restoreDriverGlobals writes the image's contents into the globals of restored module h,
// wherever its load placed them.
func (c *Context) restoreDriverGlobals(h backend.Handle, contents map[string][]byte) error {
	if len(contents) == 0 {
		return nil
	}
	m, err := c.module(h)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(contents)) {
		b := contents[name]
		p, n, err := c.rawGlobal(m.ptr, name)
		if err != nil {
			return fmt.Errorf("restore: module %d global %q: %w", h, name, err)
		}
		if n != uint64(len(b)) {
			return fmt.Errorf("restore: module %d global %q is %d bytes, the image carries %d: %w", h, name, n, len(b), backend.ErrInvalidImage)
		}
		if n > 0 {
			if err := c.MemcpyHtoD(p, b, 0, false); err != nil {
				return fmt.Errorf("restore: module %d global %q: writing it: %w", h, name, err)
			}
		}
	}
	return nil
}

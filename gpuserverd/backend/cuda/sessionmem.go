package cuda

/*
#include "driver.h"
#include "families.h"
*/
import "C"

import (
	"fmt"
	"os"

	"gpucloud/gpuserverd/backend"
)

// The program's cuMemAlloc goes through the virtual memory management API rather than the
// driver's cuMemAlloc, so its allocations can come back at the same addresses in another process
// (checkpoint.go): the context reserves one range when it is made, at a fixed address
// per device ordinal well away from where the host's libraries and the driver's own heaps live,
// and vaSpace places allocations in it. A restore reserves the image's range (the driver takes
// the address as a request; a restore that does not get it is refused). The cost: a large
// allocation is one cgo call of four driver calls (create, map, set access, release) where
// cuMemAlloc was one; small ones (up to smallMax) are placed in Go with no driver call at all;
// copies and launches see plain device pointers and are unchanged.

// Movable says whether the program's allocations go through the virtual memory API (and so
// may be checkpointed and migrated), from GPUSERVERD_MOVABLE_MEMORY=1. Off by default: NVIDIA's
// legacy IPC (cuIpcGetMemHandle) refuses such memory, and a free waits for the device; with it
// off, cuMemAlloc is the driver's and a checkpoint on this backend is refused, saying why.
var Movable = os.Getenv("GPUSERVERD_MOVABLE_MEMORY") == "1"

const (
	// vaHint is where ordinal 0's range is asked for; ordinal n's is vaStride past it.
	vaHint   = 0x6000_0000_0000
	vaStride = 1 << 40
	// vaPerMemory sizes the range: this many times the device's memory, so that fragmentation
	// of the address space never runs out before the memory does.
	vaPerMemory = 2
)

// back and drop make the context a mapper for its vaSpace.
func (c *Context) back(addr, n uint64) error {
	return check("cuMemCreate/cuMemMap", C.gc_vm_back(c.ctx, C.CUdeviceptr(addr), C.size_t(n), C.int(c.dev)))
}

func (c *Context) drop(addr, n uint64) error {
	return check("cuMemUnmap", C.gc_vm_unmap(c.ctx, C.CUdeviceptr(addr), C.size_t(n)))
}

// granularity is the device's minimum mapping granularity.
func (c *Context) granularity() (uint64, error) {
	var g C.size_t
	if err := check("cuMemGetAllocationGranularity", C.gc_vm_granularity(c.ctx, &g, 1, 1, C.int(c.dev), 0)); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

// reserveFirst reserves the context's range as soon as the context exists, before any module
// loads (a module's pinned globals are placed in it: pinned.go), so that source and restore make
// their reservations in the same order. It does not make the driver place what it maps itself
// (module code, the globals of modules it places) at the same address in two processes: the
// H100 put a module's global at 0x7fe3... on the source and 0x6027... on the restore with it. A
// failure is left for the first allocation to report.
func (c *Context) reserveFirst() {
	if !Movable {
		return
	}
	if _, err := c.space(); err != nil {
		c.mem = nil
	}
}

// space is the context's reserved range, reserved at creation (or, failing that, on first use).
func (c *Context) space() (*vaSpace, error) {
	if c.mem != nil {
		return c.mem, nil
	}
	var total C.size_t
	if err := check("cuDeviceTotalMem_v2", C.gc_device_total_mem(&total, c.dev)); err != nil {
		return nil, err
	}
	gran, err := c.granularity()
	if err != nil {
		return nil, err
	}
	size := roundUp(uint64(total)*vaPerMemory, gran)
	if err := c.reserve(vaHint+uint64(c.dev)*vaStride, size, gran, false); err != nil {
		return nil, err
	}
	return c.mem, nil
}

// reserve reserves [at, at+size) (exact: the driver must give that address, else a request it
// may place elsewhere) and makes it the context's vaSpace.
func (c *Context) reserve(at, size, gran uint64, exact bool) error {
	if size == 0 || size%gran != 0 || at%gran != 0 {
		return fmt.Errorf("cuda: address range %#x of %d bytes is not whole %d-byte granules: %w", at, size, gran, backend.ErrInvalidValue)
	}
	var p C.CUdeviceptr
	if err := check("cuMemAddressReserve", C.gc_vm_reserve(c.ctx, &p, C.size_t(size), C.size_t(gran), C.CUdeviceptr(at), 0)); err != nil {
		return err
	}
	if exact && uint64(p) != at {
		C.gc_vm_free(c.ctx, p, C.size_t(size))
		return fmt.Errorf("cuda: the driver placed the session's address range at %#x, not at %#x where its allocations live: %w",
			uint64(p), at, backend.ErrOutOfMemory)
	}
	c.mem = newVASpace(uint64(p), size, gran)
	return nil
}

// releaseSpace drops every mapping and the range (a context's close: the driver ties neither to
// the context).
func (c *Context) releaseSpace() []error {
	if c.mem == nil {
		return nil
	}
	var errs []error
	if len(c.mem.sizes) > 0 {
		errs = append(errs, c.Synchronize()) // cuMemFree waits for the device too
	}
	for _, m := range c.mem.mappings() {
		errs = append(errs, c.drop(m.addr, m.size))
	}
	errs = append(errs, check("cuMemAddressFree", C.gc_vm_free(c.ctx, C.CUdeviceptr(c.mem.base), C.size_t(c.mem.size))))
	c.mem = nil
	return errs
}

// MemAlloc is cuMemAlloc: the driver's, or placed in the session's reserved range (Movable).
func (c *Context) MemAlloc(bytes uint64) (uint64, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	if !Movable {
		var p C.CUdeviceptr
		if err := check("cuMemAlloc", C.gc_mem_alloc(c.ctx, &p, C.size_t(bytes))); err != nil {
			return 0, err
		}
		return uint64(p), nil
	}
	v, err := c.space()
	if err != nil {
		return 0, err
	}
	return v.alloc(c, bytes)
}

// MemFree is cuMemFree. Like the driver's, it waits for the device's work first: a kernel may
// still read what the program frees, and the address may be handed out again at once.
func (c *Context) MemFree(ptr uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	if !Movable {
		return check("cuMemFree", C.gc_mem_free(c.ctx, C.CUdeviceptr(ptr)))
	}
	if c.mem == nil {
		return fmt.Errorf("cuda: free of %#x, which is not an allocation: %w", ptr, backend.ErrInvalidValue)
	}
	if err := c.Synchronize(); err != nil {
		return err
	}
	return c.mem.release(c, ptr)
}

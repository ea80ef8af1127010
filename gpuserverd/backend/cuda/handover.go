package cuda

/*
#include "driver.h"
#include "families.h"
#include "ipc.h"
*/
import "C"

import (
	"cmp"
	"fmt"
	"os"
	"slices"

	"gpucloud/gpuserverd/backend"
)

// A migration between two servers on one GPU hands the session's memory over instead of copying
// it (issue 18; backend.MemoryExporter): every mapping of the session's range is exported as a
// POSIX file descriptor of its physical memory (gc_vm_back makes it exportable), and the restoring
// worker maps that same memory at the same address. Nothing is copied, so the pause does not
// grow with the session's memory; the physical memory lives on as long as either process maps it.

var _ backend.MemoryExporter = (*Context)(nil)

// ExportMemory exports every mapping of the session's range.
func (c *Context) ExportMemory() ([]backend.SharedMapping, error) {
	if c.mem == nil {
		return nil, nil
	}
	var out []backend.SharedMapping
	fail := func(err error) ([]backend.SharedMapping, error) {
		for _, m := range out {
			m.File.Close()
		}
		return nil, err
	}
	maps := c.mem.mappings()
	slices.SortFunc(maps, func(a, b span) int { return cmp.Compare(a.addr, b.addr) })
	for _, m := range maps {
		var h C.ulonglong
		if err := check("cuMemRetainAllocationHandle", C.gc_vm_retain(c.ctx, &h, C.CUdeviceptr(m.addr))); err != nil {
			return fail(err)
		}
		var fd C.int
		err := check("cuMemExportToShareableHandle", C.gc_mem_export_fd(c.ctx, &fd, h))
		C.gc_vm_release(c.ctx, h)
		if err != nil {
			return fail(fmt.Errorf("mapping %#x of %d bytes: %w", m.addr, m.size, err))
		}
		out = append(out, backend.SharedMapping{Addr: m.addr, Bytes: m.size, File: os.NewFile(uintptr(fd), "cuda-session-memory")})
	}
	return out, nil
}

// handedMapper backs a restore's mappings with the memory handed over where there is some, and
// with fresh memory elsewhere; used says which were taken.
type handedMapper struct {
	c      *Context
	shared map[uint64]backend.SharedMapping
	used   map[uint64]bool
}

func (h *handedMapper) back(addr, n uint64) error {
	m, ok := h.shared[addr]
	if !ok {
		return h.c.back(addr, n)
	}
	if m.Bytes != n {
		return fmt.Errorf("restore: memory handed over at %#x is %d bytes, the image maps %d there: %w", addr, m.Bytes, n, backend.ErrInvalidValue)
	}
	var ph C.ulonglong
	if err := check("cuMemImportFromShareableHandle", C.gc_mem_import_fd(h.c.ctx, &ph, C.int(m.File.Fd()))); err != nil {
		return err
	}
	if err := check("cuMemMap", C.gc_vm_map_handle(h.c.ctx, C.CUdeviceptr(addr), C.size_t(n), ph, h.c.dev)); err != nil {
		return err
	}
	h.used[addr] = true
	return nil
}

func (h *handedMapper) drop(addr, n uint64) error { return h.c.drop(addr, n) }

// sharedMapper is the mapper a restore places the image's regions with.
func (c *Context) sharedMapper(shared []backend.SharedMapping) (*handedMapper, error) {
	h := &handedMapper{c: c, shared: map[uint64]backend.SharedMapping{}, used: map[uint64]bool{}}
	for _, m := range shared {
		if _, dup := h.shared[m.Addr]; dup || m.File == nil {
			return nil, fmt.Errorf("restore: memory handed over twice at %#x, or without its file: %w", m.Addr, backend.ErrInvalidValue)
		}
		h.shared[m.Addr] = m
	}
	return h, nil
}

// unused names memory handed over that no region of the image took: the two sides disagree.
func (h *handedMapper) unused() error {
	for a, m := range h.shared {
		if !h.used[a] {
			return fmt.Errorf("restore: memory handed over at %#x (%d bytes) is none of the image's mappings: %w", a, m.Bytes, backend.ErrInvalidValue)
		}
	}
	return nil
}

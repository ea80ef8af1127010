package cuda

/*
#include <stdlib.h>
#include "driver.h"
#include "families.h"
*/
import "C"

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// Module globals at addresses gpuserverd chooses (issue 18). The driver places a module's
// globals itself, wherever its own heap has room, and a restore in another process finds them
// elsewhere (measured on the H100: 0x7fe3... on the source, 0x6027... on the restore); no driver
// call places a module's globals in a given range. So, with movable memory, a PTX module's
// .global variables are allocated in the session's reserved range and the module is loaded
// without them: each definition removed and each use made to read the pinned address from a
// register (pinnedPTX), or, where that rewrite fails to load, each made an .extern declaration
// the driver resolves to the pinned address at load (CU_JIT_GLOBAL_SYMBOL_NAMES/ADDRESSES; its
// JIT linker refused those as undefined references on the H100). Kernels and the guest then use
// the same address, which a restore maps again like any allocation and loads the module against
// once more. The initial values come from a plain load of the module, whose globals are copied
// and which is then unloaded.
//
// A module this cannot pin (a cubin or fat binary, or PTX the rewrite refuses, or a linker that
// says no) keeps the driver's placement; the program may use it, and the session moves as long
// as the program never asked where one of its globals lives (Image refuses, naming it).

// pin is a pinned global: its address in the session's range and its size.
type pin = [2]uint64

// pinGlobals replaces m's module with one whose .global variables live in the session's range,
// or leaves it as loaded and says why in m.placedBy.
func (c *Context) pinGlobals(m *module) {
	if !isPTX(m.image) {
		m.placedBy = "the module is a cubin or fat binary, whose globals only the driver places"
		return
	}
	defs, why := ptxGlobalDefs(ptxText(m.image))
	if why != "" {
		m.placedBy = "gpuserverd does not rewrite its PTX: " + why
		return
	}
	if len(defs) == 0 {
		return
	}
	v, err := c.space()
	if err != nil {
		m.placedBy = fmt.Sprintf("the session's address range: %v", err)
		return
	}
	pins := map[string]pin{}
	undo := func(why string) {
		for _, p := range pins {
			v.release(c, p[0])
		}
		m.placedBy = why
	}
	for _, d := range defs {
		p, n, err := c.rawGlobal(m.ptr, d.name)
		if err == nil && n == 0 {
			err = fmt.Errorf("it has 0 bytes")
		}
		var at uint64
		if err == nil {
			at, err = v.alloc(c, n)
		}
		if err == nil {
			pins[d.name] = pin{at, n}
			err = c.MemcpyDtoD(at, p, n, 0, false) // its initial value
		}
		if err != nil {
			undo(fmt.Sprintf("global %q: %v", d.name, err))
			return
		}
	}
	pinned, how, err := c.placePinned(m.image, defs, pins)
	if err != nil {
		undo(fmt.Sprintf("the driver loads the module with its globals placed by gpucloud in neither way: %v", err))
		return
	}
	for name, p := range pins {
		// The linked module either knows the name at its pinned address or not at all.
		if got, _, err := c.rawGlobal(pinned, name); err == nil && got != p[0] {
			C.gc_module_unload(c.ctx, pinned)
			undo(fmt.Sprintf("the driver placed global %q at %#x itself, not at %#x", name, got, p[0]))
			return
		}
	}
	C.gc_module_unload(c.ctx, m.ptr)
	m.ptr, m.pinned, m.pinnedBy = pinned, pins, how
}

// placePinned loads the module with its globals at pins: with their uses rewritten, else with
// them made .extern and resolved by the driver at load. how says which.
func (c *Context) placePinned(image []byte, defs []ptxGlobal, pins map[string]pin) (C.CUmodule, string, error) {
	src, rerr := pinnedPTX(ptxText(image), defs, pins)
	if rerr == nil {
		m, err := c.loadPTX(src)
		if err == nil {
			return m, "uses rewritten to the pinned addresses", nil
		}
		rerr = err
	}
	m, err := c.loadPinned(externPTX(ptxText(image), defs), pins)
	if err != nil {
		return nil, "", fmt.Errorf("rewritten: %w; as .extern: %w", rerr, err)
	}
	return m, ".extern globals resolved by the driver at load", nil
}

// loadPTX is cuModuleLoadData of PTX text.
func (c *Context) loadPTX(ptx []byte) (C.CUmodule, error) {
	src := C.CBytes(append(ptx, 0))
	defer C.free(src)
	var m C.CUmodule
	if err := check("cuModuleLoadData", C.gc_module_load_data(c.ctx, &m, src)); err != nil {
		return nil, err
	}
	return m, nil
}

// loadPinned links and loads PTX whose globals are .extern, each resolved to its pin.
func (c *Context) loadPinned(ptx []byte, pins map[string]pin) (C.CUmodule, error) {
	names := slices.Sorted(maps.Keys(pins))
	cnames := C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(cnames)
	addrs := make([]C.ulonglong, len(names))
	for i, n := range names {
		cs := C.CString(n)
		defer C.free(unsafe.Pointer(cs))
		unsafe.Slice((**C.char)(cnames), len(names))[i] = cs
		addrs[i] = C.ulonglong(pins[n][0])
	}
	src := C.CBytes(append(ptx, 0))
	defer C.free(src)
	const logN = 4096
	log := (*C.char)(C.calloc(logN, 1))
	defer C.free(unsafe.Pointer(log))
	var m C.CUmodule
	r := C.gc_module_load_pinned(c.ctx, &m, (*C.char)(src), C.size_t(len(ptx)+1), (**C.char)(cnames), &addrs[0],
		C.uint(len(names)), log, logN)
	if err := check("cuModuleLoadDataEx", r); err != nil {
		if msg := strings.TrimSpace(C.GoString(log)); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return m, nil
}

// rawGlobal asks the driver where a module's global lives.
func (c *Context) rawGlobal(m C.CUmodule, name string) (uint64, uint64, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.CUdeviceptr
	var n C.size_t
	if err := check("cuModuleGetGlobal "+name, C.gc_module_get_global(c.ctx, &p, &n, m, cname)); err != nil {
		return 0, 0, err
	}
	return uint64(p), uint64(n), nil
}

// restorePinned loads a module whose globals were pinned at the image's addresses, which the
// restore mapped already; their contents come with the image's memory.
func (c *Context) restorePinned(image []byte, pins map[string]pin) (C.CUmodule, error) {
	defs, why := ptxGlobalDefs(ptxText(image))
	if why != "" || !isPTX(image) {
		return nil, fmt.Errorf("restore: a module with pinned globals whose PTX does not rewrite (%s): %w", why, backend.ErrInvalidImage)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.name)
	}
	slices.Sort(names)
	if !slices.Equal(names, slices.Sorted(maps.Keys(pins))) {
		return nil, fmt.Errorf("restore: the module defines globals %v, the image pins %v: %w", names, slices.Sorted(maps.Keys(pins)), backend.ErrInvalidImage)
	}
	for name, p := range pins {
		if c.mem == nil || c.mem.sizes[p[0]] != p[1] {
			return nil, fmt.Errorf("restore: pinned global %q at %#x (%d bytes) is not one of the image's regions: %w", name, p[0], p[1], backend.ErrInvalidImage)
		}
	}
	m, _, err := c.placePinned(image, defs, pins)
	return m, err
}

// unpin gives a module's pinned globals back to the session's range (its unload).
func (c *Context) unpin(m *module) error {
	if len(m.pinned) == 0 || c.mem == nil {
		return nil
	}
	if err := c.Synchronize(); err != nil {
		return err
	}
	for _, p := range m.pinned {
		if err := c.mem.release(c, p[0]); err != nil {
			return err
		}
	}
	m.pinned = nil
	return nil
}

// heldGlobals names the globals the program asked the address of that the driver placed: a
// restore could not put them back where the program holds them ("" when none).
func (c *Context) heldGlobals() string {
	var held []string
	for _, h := range slices.Sorted(maps.Keys(c.modules.m)) {
		m := c.modules.m[h]
		for _, name := range slices.Sorted(maps.Keys(m.globals)) {
			held = append(held, fmt.Sprintf("global %q of module %d (%s)", name, h, m.placedBy))
		}
	}
	return strings.Join(held, ", ")
}

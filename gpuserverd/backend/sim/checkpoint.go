package sim

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	"gpucloud/gpuserverd/backend"
)

// Checkpoint and restore of a simulated context (backend.Checkpointer, backend.Restorer): the
// image lists its objects by handle and its memory by address; a restored context hands out the
// same handles and places memory at the same addresses, as the cuda backend does through the
// virtual memory management API.

var (
	_ backend.Checkpointer = (*Context)(nil)
	_ backend.Restorer     = (*Backend)(nil)
)

// Image waits for the context's work and describes it.
func (c *Context) Image() (*backend.ContextImage, error) {
	if err := c.Synchronize(); err != nil {
		return nil, fmt.Errorf("checkpoint: the context holds an error of earlier work: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if what := c.unsavable(); what != "" {
		return nil, fmt.Errorf("checkpoint: the session holds %s, which a checkpoint cannot rebuild yet: %w", what, backend.ErrNotSupported)
	}
	if held := c.heldGlobals(); held != "" {
		return nil, fmt.Errorf("checkpoint: the program holds the address of %s; the driver placed it, and a restore in another process "+
			"cannot put it at the same address: %w", held, backend.ErrNotSupported)
	}
	img := &backend.ContextImage{NextHandle: c.nextH, CacheConfig: c.cacheConfig}
	globals, placed := map[uint64]bool{}, c.placedGlobals()
	for _, h := range sortedKeys(c.modules) {
		m := c.modules[h]
		mi := backend.ModuleImage{Handle: h, Image: m.image, Globals: map[string]uint64{}}
		for name, p := range m.globals {
			if !m.placed[name] {
				mi.Globals[name], globals[p] = p, true
				continue
			}
			// A driver-placed global is no region (a restore places it anew): its bytes go by name.
			b, err := c.mem.view(p, m.sizes[name])
			if err != nil {
				return nil, fmt.Errorf("checkpoint: module %d global %q: %w", h, name, err)
			}
			if mi.Contents == nil {
				mi.Contents = map[string][]byte{}
			}
			mi.Contents[name] = append([]byte(nil), b...)
		}
		img.Modules = append(img.Modules, mi)
	}
	for _, h := range sortedKeys(c.functions) {
		img.Functions = append(img.Functions, backend.FunctionImage{Handle: h, Module: c.fnOrigin[h], Name: c.functions[h].name})
	}
	for _, h := range sortedKeys(c.streams) {
		if h == 0 {
			continue
		}
		flags := uint32(0)
		if !c.streams[h].blocking {
			flags = 1 // CU_STREAM_NON_BLOCKING
		}
		img.Streams = append(img.Streams, backend.StreamImage{Handle: h, Flags: flags})
	}
	for _, h := range sortedKeys(c.events) {
		flags := uint32(0)
		if c.events[h].noTiming {
			flags = 0x2 // CU_EVENT_DISABLE_TIMING
		}
		img.Events = append(img.Events, backend.EventImage{Handle: h, Flags: flags})
	}
	for _, h := range sortedKeys(c.blas) {
		b := c.blas[h]
		img.Blas = append(img.Blas, backend.BlasImage{Handle: h, Stream: b.stream, MathMode: b.mathMode, Workspace: b.workspace, Lt: b.lt})
	}
	for _, h := range sortedKeys(c.funcAttrs) {
		a := c.funcAttrs[h]
		img.FuncAttrs = append(img.FuncAttrs,
			backend.FuncAttrImage{Function: h, Attr: attrMaxDynamicShared, Value: a.maxDynamicShared},
			backend.FuncAttrImage{Function: h, Attr: attrCarveout, Value: a.carveout})
	}
	if len(c.limits) > 0 {
		img.Limits = map[int32]uint64{}
		for k, v := range c.limits {
			img.Limits[k] = v
		}
	}
	c.mem.mu.Lock()
	img.NextAddress = c.mem.next
	for _, base := range c.mem.bases {
		if placed[base] {
			continue
		}
		a := c.mem.alloc[base]
		img.Regions = append(img.Regions, backend.Region{Addr: base, Bytes: uint64(len(a.data)), Global: globals[base]})
	}
	c.mem.mu.Unlock()
	return img, nil
}

// placedGlobals is the addresses of the driverglobals, which stand for globals NVIDIA's driver
// places wherever it likes: they are none of the image's regions. Caller holds c.mu.
func (c *Context) placedGlobals() map[uint64]bool {
	placed := map[uint64]bool{}
	for _, m := range c.modules {
		for name := range m.placed {
			placed[m.globals[name]] = true
		}
	}
	return placed
}

// heldGlobals names the driverglobals whose address the program asked for ("" when none), as the
// cuda backend names those its driver placed. Caller holds c.mu.
func (c *Context) heldGlobals() string {
	var held []string
	for _, h := range sortedKeys(c.modules) {
		for _, name := range slices.Sorted(maps.Keys(c.modules[h].held)) {
			held = append(held, fmt.Sprintf("global %q of module %d (a simulated driver-placed global)", name, h))
		}
	}
	return strings.Join(held, ", ")
}

// unsavable names the state a checkpoint cannot rebuild yet ("" when there is none). Caller
// holds c.mu.
func (c *Context) unsavable() string {
	var what []string
	f := &c.fam
	if len(f.reservations)+len(f.physical)+len(f.mappings) > 0 {
		what = append(what, "virtual memory mappings (cuMemCreate/cuMemMap)")
	}
	if len(f.pools)+len(f.asyncAllocs) > 0 {
		what = append(what, "memory pools")
	}
	if len(f.arrays)+len(f.textures) > 0 {
		what = append(what, "arrays or textures")
	}
	if len(f.graphs)+len(f.execs)+len(f.captures)+len(f.graphAllocs) > 0 {
		what = append(what, "CUDA graphs or a stream capture")
	}
	if len(f.links) > 0 {
		what = append(what, "a linker")
	}
	if len(c.dnn)+len(c.dnnDescs) > 0 {
		what = append(what, "cuDNN handles")
	}
	if len(c.reg) > 0 {
		what = append(what, "registered host memory")
	}
	return strings.Join(what, ", ")
}

var _ backend.MemoryExporter = (*Context)(nil)

// ExportMemory hands the context's memory over as the cuda backend does, one allocation a
// mapping. The test double cannot share memory between processes: each file holds a copy of its
// allocation's bytes (an unlinked temporary file), which a restore reads back (takeShared).
func (c *Context) ExportMemory() ([]backend.SharedMapping, error) {
	c.mu.Lock()
	placed := c.placedGlobals()
	c.mu.Unlock()
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	var out []backend.SharedMapping
	for _, base := range c.mem.bases {
		if placed[base] {
			continue // the driver's memory, not the session's: it goes by name in the image
		}
		a := c.mem.alloc[base]
		f, err := os.CreateTemp("", "gpusim-memory-*")
		if err == nil {
			os.Remove(f.Name())
			_, err = f.Write(a.data)
		}
		if err != nil {
			for _, m := range out {
				m.File.Close()
			}
			return nil, fmt.Errorf("exporting %#x: %w", base, err)
		}
		out = append(out, backend.SharedMapping{Addr: base, Bytes: uint64(len(a.data)), File: f})
	}
	return out, nil
}

// takeShared fills a from the memory handed over at its address, if there is some.
func takeShared(shared map[uint64]backend.SharedMapping, a *allocation) error {
	m, ok := shared[a.base]
	if !ok {
		return nil
	}
	delete(shared, a.base)
	if m.Bytes != uint64(len(a.data)) {
		return fmt.Errorf("restore: memory handed over at %#x is %d bytes, the region %d: %w", a.base, m.Bytes, len(a.data), backend.ErrInvalidValue)
	}
	if _, err := m.File.ReadAt(a.data, 0); err != nil {
		return fmt.Errorf("restore: memory handed over at %#x: %w", a.base, err)
	}
	return nil
}

// RestoreContext rebuilds a context from img on ordinal: same handles, same addresses, memory
// zeroed until the caller writes it.
func (b *Backend) RestoreContext(ordinal int, img *backend.ContextImage) (backend.Context, error) {
	if _, err := b.device(ordinal); err != nil {
		return nil, err
	}
	var total uint64
	for _, r := range img.Regions {
		total += r.Bytes
	}
	if err := b.reserve(ordinal, total); err != nil {
		return nil, fmt.Errorf("restore: %d bytes of device memory: %w", total, err)
	}
	c := newContext(b, ordinal)
	if extra, err := c.restore(img); err != nil {
		placed := c.mem.used - extra // the regions placed; extra was reserved on its own
		c.Close()                    // gives back what was placed
		b.release(ordinal, total-placed)
		return nil, err
	}
	return c, nil
}

// restore rebuilds the context; extra is the bytes of the driverglobals it placed anew (reserved
// apart from the regions').
func (c *Context) restore(img *backend.ContextImage) (extra uint64, err error) {
	shared := map[uint64]backend.SharedMapping{}
	for _, m := range img.Shared {
		if _, dup := shared[m.Addr]; dup || m.File == nil {
			return extra, fmt.Errorf("restore: memory handed over twice at %#x, or without its file: %w", m.Addr, backend.ErrInvalidValue)
		}
		shared[m.Addr] = m
	}
	defer func() {
		for a := range shared { // what no region took
			err = errors.Join(err, fmt.Errorf("restore: memory handed over at %#x is none of the image's regions: %w", a, backend.ErrInvalidValue))
		}
	}()
	regions := append([]backend.Region(nil), img.Regions...)
	sort.Slice(regions, func(i, j int) bool { return regions[i].Addr < regions[j].Addr })
	// The memory stays in the address block of the device it was made on, whichever device it
	// is restored on (a move to another GPU: addresses are the process's, as with the cuda
	// backend's reserved range), so all of it must lie in one block.
	base := addressBase + uint64(c.ordinal)*deviceStride
	if len(regions) > 0 && regions[0].Addr >= addressBase {
		base = addressBase + (regions[0].Addr-addressBase)/deviceStride*deviceStride
	}
	end := base
	for _, r := range regions {
		if r.Addr < end || r.Addr%alignment != 0 || r.Bytes > deviceStride || r.Addr+r.Bytes > base+deviceStride {
			return extra, fmt.Errorf("restore: region %#x of %d bytes overlaps another or lies outside the image's device block at %#x: %w",
				r.Addr, r.Bytes, base, backend.ErrInvalidValue)
		}
		a := &allocation{base: r.Addr, data: make([]byte, r.Bytes)}
		if err := takeShared(shared, a); err != nil {
			return extra, err
		}
		c.mem.insert(a)
		c.mem.used += r.Bytes
		end = r.Addr + max(r.Bytes, 1)
	}
	c.mem.next = max(img.NextAddress, end+(alignment-end%alignment)%alignment)
	for _, m := range img.Modules {
		kernels, sizes, managed, err := parseImage(m.Image)
		if err != nil {
			return extra, fmt.Errorf("restore: module %d: %w", m.Handle, err)
		}
		mod := &module{image: m.Image, kernels: map[string]bool{}, globals: map[string]uint64{}, sizes: sizes,
			placed: driverPlaced(m.Image), managed: map[uint64]bool{}}
		for _, k := range kernels {
			mod.kernels[k] = true
		}
		for _, name := range slices.Sorted(maps.Keys(sizes)) {
			if mod.placed[name] {
				// As NVIDIA's driver does on a load: somewhere new, with its initial value, then
				// what the program left in it.
				p, err := c.placeGlobal(sizes[name], m.Contents[name])
				if err != nil {
					return extra, fmt.Errorf("restore: module %d global %s: %w", m.Handle, name, err)
				}
				mod.globals[name], extra = p, extra+sizes[name]
				continue
			}
			p, ok := m.Globals[name]
			if _, err := c.mem.view(p, sizes[name]); !ok || err != nil {
				return extra, fmt.Errorf("restore: module %d global %s has no region: %w", m.Handle, name, backend.ErrInvalidValue)
			}
			mod.globals[name] = p
			if _, ok := managed[name]; ok {
				mod.managed[p] = true
			}
		}
		for name := range m.Contents {
			if !mod.placed[name] {
				return extra, fmt.Errorf("restore: module %d has no driver-placed global %q for the image's contents: %w", m.Handle, name, backend.ErrInvalidValue)
			}
		}
		c.modules[m.Handle] = mod
	}
	c.fnOrigin = map[backend.Handle]backend.Handle{}
	for _, f := range img.Functions {
		k, ok := builtins[f.Name]
		if m := c.modules[f.Module]; !ok || m == nil || !m.kernels[f.Name] {
			return extra, fmt.Errorf("restore: function %d (%q of module %d): %w", f.Handle, f.Name, f.Module, backend.ErrNotFound)
		}
		c.functions[f.Handle] = k
		c.fnOrigin[f.Handle] = f.Module
	}
	for _, s := range img.Streams {
		st := newStream()
		st.blocking = s.Flags&1 == 0
		c.streams[s.Handle] = st
	}
	for _, e := range img.Events {
		c.events[e.Handle] = &event{noTiming: e.Flags&0x2 != 0}
	}
	for _, bh := range img.Blas {
		if c.blas == nil {
			c.blas = map[backend.Handle]*blasHandle{}
		}
		c.blas[bh.Handle] = &blasHandle{stream: bh.Stream, mathMode: bh.MathMode, workspace: bh.Workspace, lt: bh.Lt}
	}
	c.nextH = img.NextHandle
	for _, a := range img.FuncAttrs {
		if err := c.FuncSetAttribute(a.Function, a.Attr, a.Value); err != nil {
			return extra, fmt.Errorf("restore: attribute %d of function %d: %w", a.Attr, a.Function, err)
		}
	}
	for k, v := range img.Limits {
		if err := c.SetLimit(k, v); err != nil {
			return extra, fmt.Errorf("restore: limit %d: %w", k, err)
		}
	}
	c.cacheConfig = img.CacheConfig
	if h := c.maxHandle(); h >= c.nextH {
		return extra, fmt.Errorf("restore: handle %d at or past the next handle %d: %w", h, c.nextH, backend.ErrInvalidValue)
	}
	return extra, nil
}

// placeGlobal places a driverglobal at the next free address, zeroed, and writes contents (the
// image's, if it carries them) into it.
func (c *Context) placeGlobal(size uint64, contents []byte) (uint64, error) {
	if contents != nil && uint64(len(contents)) != size {
		return 0, fmt.Errorf("the image carries %d bytes of it, the module declares %d: %w", len(contents), size, backend.ErrInvalidValue)
	}
	if err := c.b.reserve(c.ordinal, size); err != nil {
		return 0, err
	}
	p := c.mem.add(size)
	b, err := c.mem.view(p, size)
	if err != nil {
		return 0, err
	}
	copy(b, contents)
	return p, nil
}

// maxHandle is the highest handle the restored context holds.
func (c *Context) maxHandle() backend.Handle {
	var top backend.Handle
	for _, ks := range [][]backend.Handle{sortedKeys(c.modules), sortedKeys(c.functions), sortedKeys(c.streams),
		sortedKeys(c.events), sortedKeys(c.blas)} {
		if len(ks) > 0 {
			top = max(top, ks[len(ks)-1])
		}
	}
	return top
}

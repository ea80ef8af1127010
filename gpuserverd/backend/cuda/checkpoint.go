package cuda

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gpucloud/gpuserverd/backend"
)

// Checkpoint and restore of a CUDA context (issue 18; backend.Checkpointer, backend.Restorer).
// The image lists the context's objects by handle and its allocations by address; a restore, in
// a fresh worker on the same GPU or another of the same model, reserves the same address range
// (sessionmem.go), maps the allocations at their addresses, loads the modules from the images
// the guest sent, finds functions by name, and makes streams, events and cuBLAS/cuBLASLt handles
// again, each under its old handle, in the order they were first made. A module's globals come
// back at their addresses where gpuserverd placed them (pinned.go); those the driver placed come
// back wherever it puts them, with the contents the image carries by name (driverglobals.go); a
// session whose program asked the address of one the driver placed is refused at its image,
// naming it, before anything is written or sent. What the driver cannot rebuild is refused by name.

var (
	_ backend.Checkpointer = (*Context)(nil)
	_ backend.Restorer     = (*Backend)(nil)
)

// Image waits for the context's work and describes it.
func (c *Context) Image() (*backend.ContextImage, error) {
	if !Movable {
		return nil, fmt.Errorf("checkpoint: this gpuserverd allocates with the driver's cuMemAlloc, whose addresses another process cannot take again (start it with GPUSERVERD_MOVABLE_MEMORY=1): %w", backend.ErrNotSupported)
	}
	if err := c.Synchronize(); err != nil {
		return nil, fmt.Errorf("checkpoint: the context holds an error of earlier work: %w", err)
	}
	if what := c.unsavable(); what != "" {
		return nil, fmt.Errorf("checkpoint: the session holds %s, which a checkpoint cannot rebuild yet: %w", what, backend.ErrNotSupported)
	}
	if held := c.heldGlobals(); held != "" {
		return nil, fmt.Errorf("checkpoint: the program holds the address of %s; the driver placed it, and a restore in another process "+
			"cannot put it at the same address: %w", held, backend.ErrNotSupported)
	}
	img := &backend.ContextImage{NextHandle: c.next + 1} // c.next is the last handle given
	if c.mem != nil {
		img.Reserved = [2]uint64{c.mem.base, c.mem.size}
		img.Regions = c.mem.regions()
	}
	left := uint64(maxGlobalContents)
	for _, h := range slices.Sorted(maps.Keys(c.modules.m)) {
		m := c.modules.m[h]
		contents, err := c.driverGlobalContents(h, m, &left)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w: %w", err, backend.ErrNotSupported)
		}
		img.Modules = append(img.Modules, backend.ModuleImage{Handle: h, Image: m.image, Pinned: maps.Clone(m.pinned), Contents: contents})
	}
	for _, h := range slices.Sorted(maps.Keys(c.functions.m)) {
		f := c.functions.m[h]
		img.Functions = append(img.Functions, backend.FunctionImage{Handle: h, Module: f.module, Name: f.name})
		for _, a := range slices.Sorted(maps.Keys(f.attrs)) {
			img.FuncAttrs = append(img.FuncAttrs, backend.FuncAttrImage{Function: h, Attr: a, Value: f.attrs[a]})
		}
	}
	for _, h := range slices.Sorted(maps.Keys(c.streams.m)) {
		img.Streams = append(img.Streams, backend.StreamImage{Handle: h, Flags: c.streamFlag[h]})
	}
	for _, h := range slices.Sorted(maps.Keys(c.events.m)) {
		img.Events = append(img.Events, backend.EventImage{Handle: h, Flags: c.eventFlag[h]})
	}
	for _, h := range slices.Sorted(maps.Keys(c.blas)) {
		b := c.blas[h]
		img.Blas = append(img.Blas, backend.BlasImage{Handle: h, Stream: b.streamH, MathMode: b.mathMode, Workspace: b.workspace, Lt: b.lt})
	}
	img.Limits = maps.Clone(c.limits)
	if c.cacheSet != nil {
		img.CacheConfig = *c.cacheSet
	}
	slices.SortFunc(img.Regions, func(a, b backend.Region) int { return cmp.Compare(a.Addr, b.Addr) })
	return img, nil
}

// unsavable names what the context holds that a restore could not make again ("" when nothing).
func (c *Context) unsavable() string {
	var what []string
	if len(c.dnn.handles)+len(c.dnn.descs) > 0 {
		what = append(what, "cuDNN handles or plans")
	}
	if len(c.reg) > 0 {
		what = append(what, "registered host memory")
	}
	if f := c.fam; f != nil {
		if len(f.graphs.m)+len(f.execs.m) > 0 {
			what = append(what, "CUDA graphs")
		}
		if len(f.pools.m)+len(f.asyncBytes) > 0 {
			what = append(what, "memory pools or stream-ordered allocations")
		}
		if len(f.arrays.m) > 0 {
			what = append(what, "arrays")
		}
		if len(f.links.m) > 0 {
			what = append(what, "a linker")
		}
	}
	return strings.Join(what, ", ")
}

// RestoreContext rebuilds a context from img on ordinal: same handles, same addresses, memory
// undefined until the caller writes it.
func (b *Backend) RestoreContext(ordinal int, img *backend.ContextImage) (backend.Context, error) {
	c, err := newDeviceContext(ordinal, false)
	if err != nil {
		return nil, err
	}
	if err := c.restore(img); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// object is one of an image's objects, replayed in handle order.
type object struct {
	h   backend.Handle
	run func(h backend.Handle) error
}

func (c *Context) restore(img *backend.ContextImage) error {
	if r := img.Reserved; r[1] > 0 {
		gran, err := c.granularity()
		if err != nil {
			return err
		}
		if err := c.reserve(r[0], r[1], gran, true); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	hm, err := c.sharedMapper(img.Shared)
	if err != nil {
		return err
	}
	for _, r := range img.Regions {
		if r.Global {
			continue
		}
		if c.mem == nil {
			return fmt.Errorf("restore: allocation %#x without a reserved range: %w", r.Addr, backend.ErrInvalidValue)
		}
		if err := c.mem.place(hm, r); err != nil {
			return err
		}
	}
	if err := hm.unused(); err != nil {
		return err
	}
	// Objects made during the replay take handles past the image's, then move to their own.
	if img.NextHandle == 0 {
		return fmt.Errorf("restore: next handle 0: %w", backend.ErrInvalidValue)
	}
	c.next = img.NextHandle - 1
	var objs []object
	for _, m := range img.Modules {
		objs = append(objs, object{m.Handle, func(h backend.Handle) error { return c.restoreModule(h, m) }})
	}
	for _, f := range img.Functions {
		objs = append(objs, object{f.Handle, func(h backend.Handle) error { return c.restoreFunction(h, f) }})
	}
	for _, s := range img.Streams {
		objs = append(objs, object{s.Handle, func(h backend.Handle) error {
			return flagged(c, "stream", h, &c.streams, c.streamFlag, s.Flags, func() (backend.Handle, error) { return c.StreamCreate(s.Flags) })
		}})
	}
	for _, e := range img.Events {
		objs = append(objs, object{e.Handle, func(h backend.Handle) error {
			return flagged(c, "event", h, &c.events, c.eventFlag, e.Flags, func() (backend.Handle, error) { return c.EventCreate(e.Flags) })
		}})
	}
	for _, bi := range img.Blas {
		create := c.BlasCreate
		if bi.Lt {
			create = c.LtCreate
		}
		objs = append(objs, object{bi.Handle, func(h backend.Handle) error {
			return c.moved("cuBLAS handle", h, create, func(tmp backend.Handle) {
				c.blas[h] = c.blas[tmp]
				delete(c.blas, tmp)
			})
		}})
	}
	slices.SortFunc(objs, func(a, b object) int { return cmp.Compare(a.h, b.h) })
	for i, o := range objs {
		if o.h == 0 || o.h >= img.NextHandle || i > 0 && objs[i-1].h == o.h {
			return fmt.Errorf("restore: handle %d is 0, repeated, or at or past the next handle %d: %w", o.h, img.NextHandle, backend.ErrInvalidValue)
		}
		if err := o.run(o.h); err != nil {
			return err
		}
	}
	return c.restoreSettings(img)
}

// moved makes an object with create, whose handle is past the image's, and hands move that
// handle so the object takes its old one, h.
func (c *Context) moved(kind string, h backend.Handle, create func() (backend.Handle, error), move func(tmp backend.Handle)) error {
	next := c.next
	tmp, err := create()
	c.next = next
	if err != nil {
		return fmt.Errorf("restore: %s %d: %w", kind, h, err)
	}
	move(tmp)
	return nil
}

// flagged is moved for a stream or an event, which keeps its creation flags by handle.
func flagged[T any](c *Context, kind string, h backend.Handle, t *handles[T], flags map[backend.Handle]uint32, f uint32,
	create func() (backend.Handle, error)) error {
	return c.moved(kind, h, create, func(tmp backend.Handle) {
		t.put(h, t.m[tmp])
		t.remove(tmp)
		flags[h] = f
		delete(flags, tmp)
	})
}

func (c *Context) restoreModule(h backend.Handle, m backend.ModuleImage) error {
	// A module whose globals the driver placed on the source is left to the driver again.
	load := func() (backend.Handle, error) { return c.loadModule(m.Image, false) }
	if len(m.Pinned) > 0 {
		load = func() (backend.Handle, error) {
			ptr, err := c.restorePinned(m.Image, m.Pinned)
			if err != nil {
				return 0, err
			}
			return c.modules.add(&module{ptr: ptr, image: m.Image, pinned: maps.Clone(m.Pinned)}), nil
		}
	}
	err := c.moved("module", h, load, func(tmp backend.Handle) {
		c.modules.put(h, c.modules.m[tmp])
		c.modules.remove(tmp)
	})
	if err != nil {
		return err
	}
	if err := c.restoreDriverGlobals(h, m.Contents); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(m.Globals)) {
		p, _, err := c.ModuleGetGlobal(h, name)
		if err != nil {
			return fmt.Errorf("restore: module %d global %q: %w", h, name, err)
		}
		if p != m.Globals[name] {
			return fmt.Errorf("restore: module %d global %q comes back at %#x, not at %#x where the program holds it: %w",
				h, name, p, m.Globals[name], backend.ErrNotSupported)
		}
	}
	return nil
}

func (c *Context) restoreFunction(h backend.Handle, f backend.FunctionImage) error {
	m, err := c.modules.get(f.Module)
	if err != nil {
		return fmt.Errorf("restore: function %d (%q) of module %d: %w", h, f.Name, f.Module, err)
	}
	return c.moved("function "+f.Name, h, func() (backend.Handle, error) { return c.ModuleGetFunction(f.Module, f.Name) }, func(tmp backend.Handle) {
		c.functions.put(h, c.functions.m[tmp])
		c.functions.remove(tmp)
		m.funcs[len(m.funcs)-1] = h
	})
}

// restoreSettings sets again what the program set on its objects and its context.
func (c *Context) restoreSettings(img *backend.ContextImage) error {
	for _, bi := range img.Blas {
		if bi.Lt {
			continue
		}
		if bi.Stream != 0 {
			if err := c.BlasSetStream(bi.Handle, bi.Stream); err != nil {
				return fmt.Errorf("restore: cuBLAS handle %d stream: %w", bi.Handle, err)
			}
		}
		if bi.MathMode != 0 {
			if err := c.BlasSetMathMode(bi.Handle, bi.MathMode); err != nil {
				return fmt.Errorf("restore: cuBLAS handle %d math mode: %w", bi.Handle, err)
			}
		}
		if ws := bi.Workspace; ws[1] > 0 {
			if err := c.BlasSetWorkspace(bi.Handle, ws[0], ws[1]); err != nil {
				return fmt.Errorf("restore: cuBLAS handle %d workspace: %w", bi.Handle, err)
			}
		}
	}
	for _, a := range img.FuncAttrs {
		if err := c.FuncSetAttribute(a.Function, a.Attr, a.Value); err != nil {
			return fmt.Errorf("restore: attribute %d of function %d: %w", a.Attr, a.Function, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(img.Limits)) {
		if err := c.SetLimit(k, img.Limits[k]); err != nil {
			return fmt.Errorf("restore: limit %d: %w", k, err)
		}
	}
	if img.CacheConfig != 0 {
		if err := c.SetCacheConfig(img.CacheConfig); err != nil {
			return fmt.Errorf("restore: cache preference: %w", err)
		}
	}
	return nil
}

package cuda

/*
#include <stdlib.h>
#include "families.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// famTables holds the families' driver objects by handle. Physical allocations, texture and
// surface objects are the driver's own 64-bit values (process-local: a session's worker holds
// only its own); pointer-typed objects get handles.
type famTables struct {
	pools      handles[C.CUmemoryPool]
	poolIDs    map[C.CUmemoryPool]backend.Handle
	arrays     handles[C.CUarray]
	graphs     handles[C.CUgraph]
	nodes      handles[C.CUgraphNode]
	nodeIDs    map[C.CUgraphNode]backend.Handle
	execs      handles[C.CUgraphExec]
	asyncBytes map[uint64]uint64 // stream-ordered allocation -> size
	links      handles[unsafe.Pointer]
	linkData   map[backend.Handle][]unsafe.Pointer // inputs in C memory, kept until the link goes
	ext        *graphExtras                        // conditional bodies, graph allocations (graphextras.go)
	hostFns    []backend.HostFn                    // host nodes' guest functions by token-1 (graphedits.go)
}

var (
	_ backend.VirtualMemory = (*Context)(nil)
	_ backend.MemPools      = (*Context)(nil)
	_ backend.Arrays        = (*Context)(nil)
	_ backend.Textures      = (*Context)(nil)
	_ backend.Graphs        = (*Context)(nil)
	_ backend.Launches      = (*Context)(nil)
	_ backend.StreamMemOps  = (*Context)(nil)
	_ backend.TensorMaps    = (*Context)(nil)
	_ backend.Linker        = (*Context)(nil)
)

// The tables famGet looks in.
func poolsOf(t *famTables) *handles[C.CUmemoryPool] { return &t.pools }
func arraysOf(t *famTables) *handles[C.CUarray]     { return &t.arrays }
func graphsOf(t *famTables) *handles[C.CUgraph]     { return &t.graphs }
func execsOf(t *famTables) *handles[C.CUgraphExec]  { return &t.execs }
func linksOf(t *famTables) *handles[unsafe.Pointer] { return &t.links }

// famGet looks h up in one of a live context's family tables.
func famGet[T any](c *Context, table func(*famTables) *handles[T], h backend.Handle) (*famTables, T, error) {
	var zero T
	t, err := c.tables()
	if err != nil {
		return nil, zero, err
	}
	v, err := table(t).get(h)
	return t, v, err
}

func (c *Context) tables() (*famTables, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	if c.fam == nil {
		c.fam = &famTables{
			pools: newHandles[C.CUmemoryPool]("memory pool", &c.next), poolIDs: map[C.CUmemoryPool]backend.Handle{},
			arrays: newHandles[C.CUarray]("array", &c.next), graphs: newHandles[C.CUgraph]("graph", &c.next),
			nodes: newHandles[C.CUgraphNode]("graph node", &c.next), nodeIDs: map[C.CUgraphNode]backend.Handle{},
			execs: newHandles[C.CUgraphExec]("executable graph", &c.next), asyncBytes: map[uint64]uint64{},
			links: newHandles[unsafe.Pointer]("link", &c.next), linkData: map[backend.Handle][]unsafe.Pointer{},
		}
	}
	return c.fam, nil
}

// ---- virtual memory ----

func (c *Context) MemAddressReserve(size, alignment, addr, flags uint64) (uint64, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	err := check("cuMemAddressReserve", C.gc_vm_reserve(c.ctx, &p, C.size_t(size), C.size_t(alignment), C.CUdeviceptr(addr), C.ulonglong(flags)))
	return uint64(p), err
}

func (c *Context) MemAddressFree(ptr, size uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuMemAddressFree", C.gc_vm_free(c.ctx, C.CUdeviceptr(ptr), C.size_t(size)))
}

func (c *Context) MemCreate(p backend.AllocProps, flags uint64) (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	locID := C.int(p.LocationID)
	if p.LocationType == 1 && p.LocationID == 0 {
		locID = C.int(c.dev) // the session's device 0 is this context's device
	}
	var h C.ulonglong
	err := check("cuMemCreate", C.gc_vm_create(c.ctx, &h, C.size_t(p.Size), C.uint(p.Type), C.uint(p.LocationType),
		locID, C.uint(p.HandleTypes), C.uint(p.Compression), C.ulonglong(flags)))
	return backend.Handle(h), err
}

func (c *Context) MemRelease(h backend.Handle) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuMemRelease", C.gc_vm_release(c.ctx, C.ulonglong(h)))
}

func (c *Context) MemMap(ptr, size, offset uint64, h backend.Handle, flags uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuMemMap", C.gc_vm_map(c.ctx, C.CUdeviceptr(ptr), C.size_t(size), C.size_t(offset), C.ulonglong(h), C.ulonglong(flags)))
}

func (c *Context) MemUnmap(ptr, size uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuMemUnmap", C.gc_vm_unmap(c.ctx, C.CUdeviceptr(ptr), C.size_t(size)))
}

func (c *Context) MemSetAccess(ptr, size uint64, locType uint32, locID int32, flags uint32) error {
	if err := c.live(); err != nil {
		return err
	}
	if locType == 1 && locID == 0 {
		locID = int32(c.dev) // the session's device 0 is this context's device
	}
	return check("cuMemSetAccess", C.gc_vm_set_access(c.ctx, C.CUdeviceptr(ptr), C.size_t(size), C.uint(locType), C.int(locID), C.uint(flags)))
}

func (c *Context) MemGetAllocationGranularity(p backend.AllocProps, option uint32) (uint64, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var g C.size_t
	err := check("cuMemGetAllocationGranularity", C.gc_vm_granularity(c.ctx, &g, C.uint(p.Type), C.uint(p.LocationType), C.int(c.dev), C.uint(option)))
	return uint64(g), err
}

func (c *Context) MemGetAllocationProperties(h backend.Handle) (backend.AllocProps, error) {
	if err := c.live(); err != nil {
		return backend.AllocProps{}, err
	}
	var typ, lt, ht, comp C.uint
	var id C.int
	err := check("cuMemGetAllocationPropertiesFromHandle", C.gc_vm_props(c.ctx, C.ulonglong(h), &typ, &lt, &id, &ht, &comp))
	return backend.AllocProps{Type: uint32(typ), LocationType: uint32(lt), LocationID: 0, HandleTypes: uint32(ht),
		Compression: uint32(comp)}, err
}

func (c *Context) MemRetainAllocationHandle(ptr uint64) (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var h C.ulonglong
	err := check("cuMemRetainAllocationHandle", C.gc_vm_retain(c.ctx, &h, C.CUdeviceptr(ptr)))
	return backend.Handle(h), err
}

// ---- memory pools ----

func (c *Context) pool(t *famTables, h backend.Handle) (C.CUmemoryPool, error) {
	if h == 0 {
		return nil, nil
	}
	return t.pools.get(h)
}

// poolHandle names a driver pool, giving it a handle the first time it is seen.
func (t *famTables) poolHandle(p C.CUmemoryPool) backend.Handle {
	if h, ok := t.poolIDs[p]; ok {
		return h
	}
	h := t.pools.add(p)
	t.poolIDs[p] = h
	return h
}

func (c *Context) MemAllocAsync(bytes uint64, stream, pool backend.Handle) (uint64, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	s, err := c.stream(stream)
	if err != nil {
		return 0, err
	}
	p, err := c.pool(t, pool)
	if err != nil {
		return 0, err
	}
	var d C.CUdeviceptr
	if err := check("cuMemAllocAsync", C.gc_alloc_async(c.ctx, &d, C.size_t(bytes), p, s)); err != nil {
		return 0, err
	}
	t.asyncBytes[uint64(d)] = bytes
	return uint64(d), nil
}

func (c *Context) MemFreeAsync(ptr uint64, stream backend.Handle) (uint64, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	s, err := c.stream(stream)
	if err != nil {
		return 0, err
	}
	n, ok := t.asyncBytes[ptr]
	if !ok && t.ext != nil && t.ext.allocs[ptr] { // a graph's allocation, freed outside its graph
		return 0, check("cuMemFreeAsync", C.gc_free_async(c.ctx, C.CUdeviceptr(ptr), s))
	}
	if !ok {
		return 0, fmt.Errorf("cuda: stream-ordered free of %#x, not a stream-ordered allocation: %w", ptr, backend.ErrInvalidValue)
	}
	if err := check("cuMemFreeAsync", C.gc_free_async(c.ctx, C.CUdeviceptr(ptr), s)); err != nil {
		return 0, err
	}
	delete(t.asyncBytes, ptr)
	return n, nil
}

func (c *Context) MemPoolCreate(p backend.PoolProps) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	locID := C.int(p.LocationID)
	if p.LocationType == 1 && p.LocationID == 0 {
		locID = C.int(c.dev)
	}
	var pool C.CUmemoryPool
	if err := check("cuMemPoolCreate", C.gc_pool_create(c.ctx, &pool, C.uint(p.AllocType), C.uint(p.HandleTypes),
		C.uint(p.LocationType), locID, C.size_t(p.MaxSize))); err != nil {
		return 0, err
	}
	return t.poolHandle(pool), nil
}

func (c *Context) MemPoolDestroy(h backend.Handle) error {
	t, p, err := famGet(c, poolsOf, h)
	if err != nil {
		return err
	}
	if err := check("cuMemPoolDestroy", C.gc_pool_destroy(c.ctx, p)); err != nil {
		return err
	}
	t.pools.remove(h)
	delete(t.poolIDs, p)
	return nil
}

func (c *Context) MemPoolSetAttribute(h backend.Handle, attr int32, v uint64) error {
	_, p, err := famGet(c, poolsOf, h)
	if err != nil {
		return err
	}
	return check("cuMemPoolSetAttribute", C.gc_pool_set(c.ctx, p, C.int(attr), C.ulonglong(v)))
}

func (c *Context) MemPoolGetAttribute(h backend.Handle, attr int32) (uint64, error) {
	_, p, err := famGet(c, poolsOf, h)
	if err != nil {
		return 0, err
	}
	var v C.ulonglong
	err = check("cuMemPoolGetAttribute", C.gc_pool_get(c.ctx, p, C.int(attr), &v))
	return uint64(v), err
}

func (c *Context) MemPoolTrimTo(h backend.Handle, keep uint64) error {
	_, p, err := famGet(c, poolsOf, h)
	if err != nil {
		return err
	}
	return check("cuMemPoolTrimTo", C.gc_pool_trim(c.ctx, p, C.size_t(keep)))
}

func (c *Context) devicePool(def bool) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	var p C.CUmemoryPool
	if err := check("cuDeviceGetMemPool", C.gc_device_pool(c.ctx, &p, c.dev, C.int(boolInt(def)))); err != nil {
		return 0, err
	}
	return t.poolHandle(p), nil
}

func (c *Context) DefaultMemPool() (backend.Handle, error) { return c.devicePool(true) }
func (c *Context) CurrentMemPool() (backend.Handle, error) { return c.devicePool(false) }

func (c *Context) SetMemPool(h backend.Handle) error {
	_, p, err := famGet(c, poolsOf, h)
	if err != nil {
		return err
	}
	return check("cuDeviceSetMemPool", C.gc_device_set_pool(c.ctx, c.dev, p))
}

// ---- arrays and 3-D copies ----

func (c *Context) ArrayCreate(d backend.ArrayDesc) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	var a C.CUarray
	if err := check("cuArray3DCreate", C.gc_array_create(c.ctx, &a, C.size_t(d.Width), C.size_t(d.Height), C.size_t(d.Depth),
		C.uint(d.Format), C.uint(d.Channels), C.uint(d.Flags))); err != nil {
		return 0, err
	}
	return t.arrays.add(a), nil
}

func (c *Context) ArrayDestroy(h backend.Handle) error {
	t, a, err := famGet(c, arraysOf, h)
	if err != nil {
		return err
	}
	if err := check("cuArrayDestroy", C.gc_array_destroy(c.ctx, a)); err != nil {
		return err
	}
	t.arrays.remove(h)
	return nil
}

func (c *Context) ArrayDescriptor(h backend.Handle) (backend.ArrayDesc, error) {
	_, a, err := famGet(c, arraysOf, h)
	if err != nil {
		return backend.ArrayDesc{}, err
	}
	var w, ht, d C.size_t
	var f, ch, fl C.uint
	err = check("cuArray3DGetDescriptor", C.gc_array_desc(c.ctx, a, &w, &ht, &d, &f, &ch, &fl))
	return backend.ArrayDesc{Width: uint64(w), Height: uint64(ht), Depth: uint64(d), Format: uint32(f),
		Channels: uint32(ch), Flags: uint32(fl)}, err
}

// side converts a copy side; a host side is packed (rows of w bytes, h rows a slice).
func (c *Context) side(t *famTables, s backend.CopySide, w, h uint64) (C.struct_gc_side, error) {
	out := C.struct_gc_side{kind: C.uint(s.Kind), ptr: C.CUdeviceptr(s.Ptr), pitch: C.size_t(s.Pitch),
		height: C.size_t(s.Height), x: C.size_t(s.X), y: C.size_t(s.Y), z: C.size_t(s.Z)}
	switch s.Kind {
	case backend.SideHost:
		out.pitch, out.height, out.x, out.y, out.z = C.size_t(w), C.size_t(h), 0, 0, 0
	case backend.SideDevice:
	case backend.SideArray:
		a, err := t.arrays.get(backend.Handle(s.Ptr))
		if err != nil {
			return out, err
		}
		out.arr, out.ptr = a, 0
	default:
		return out, fmt.Errorf("cuda: copy side of kind %d: %w", s.Kind, backend.ErrInvalidValue)
	}
	return out, nil
}

func (c *Context) copySides(t *famTables, cp backend.Copy3D, host unsafe.Pointer) (src, dst C.struct_gc_side, err error) {
	if src, err = c.side(t, cp.Src, cp.Width, cp.Height); err != nil {
		return
	}
	if dst, err = c.side(t, cp.Dst, cp.Width, cp.Height); err != nil {
		return
	}
	if cp.Src.Kind == backend.SideHost {
		src.host = host
	}
	if cp.Dst.Kind == backend.SideHost {
		dst.host = host
	}
	return
}

func (c *Context) Memcpy3D(cp backend.Copy3D) error {
	t, err := c.tables()
	if err != nil {
		return err
	}
	s, err := c.stream(cp.Stream)
	if err != nil {
		return err
	}
	hostSide := cp.Src.Kind == backend.SideHost || cp.Dst.Kind == backend.SideHost
	if hostSide && uint64(len(cp.Host)) != cp.Width*cp.Height*cp.Depth {
		return fmt.Errorf("cuda: a %dx%dx%d host box with %d bytes: %w", cp.Width, cp.Height, cp.Depth, len(cp.Host), backend.ErrInvalidValue)
	}
	// Host bytes go through C memory: the driver may not keep a Go pointer, and the copy is
	// finished before this returns (gc_copy3d waits for copies with the host).
	var host unsafe.Pointer
	if hostSide && len(cp.Host) > 0 {
		host = C.malloc(C.size_t(len(cp.Host)))
		defer C.free(host)
		if cp.Src.Kind == backend.SideHost {
			copy(unsafe.Slice((*byte)(host), len(cp.Host)), cp.Host)
		}
	}
	src, dst, err := c.copySides(t, cp, host)
	if err != nil {
		return err
	}
	if err := check("cuMemcpy3D", C.gc_copy3d(c.ctx, &src, &dst, C.size_t(cp.Width), C.size_t(cp.Height), C.size_t(cp.Depth),
		s, C.int(boolInt(cp.Async)))); err != nil {
		return err
	}
	if cp.Dst.Kind == backend.SideHost && host != nil {
		copy(cp.Host, unsafe.Slice((*byte)(host), len(cp.Host)))
	}
	return nil
}

// ---- textures and surfaces ----

func (c *Context) TexObjectCreate(r backend.ResourceDesc, texDesc, viewDesc []byte) (uint64, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	var arr C.CUarray
	if r.Type == 0 {
		if arr, err = t.arrays.get(backend.Handle(r.Handle)); err != nil {
			return 0, err
		}
	}
	if len(texDesc) == 0 {
		return 0, fmt.Errorf("cuda: texture object without a texture descriptor: %w", backend.ErrInvalidValue)
	}
	tex := C.CBytes(texDesc)
	defer C.free(tex)
	var view unsafe.Pointer
	if len(viewDesc) > 0 {
		view = C.CBytes(viewDesc)
		defer C.free(view)
	}
	var obj C.ulonglong
	err = check("cuTexObjectCreate", C.gc_tex_create(c.ctx, &obj, C.uint(r.Type), C.CUdeviceptr(r.Handle), arr, C.uint(r.Format),
		C.uint(r.Channels), C.size_t(r.Width), C.size_t(r.Height), C.size_t(r.Pitch), C.size_t(r.SizeBytes), C.uint(r.Flags),
		tex, C.size_t(len(texDesc)), view, C.size_t(len(viewDesc))))
	return uint64(obj), err
}

func (c *Context) TexObjectDestroy(obj uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuTexObjectDestroy", C.gc_tex_destroy(c.ctx, C.ulonglong(obj)))
}

func (c *Context) TexObjectResourceDesc(obj uint64) (backend.ResourceDesc, error) {
	t, err := c.tables()
	if err != nil {
		return backend.ResourceDesc{}, err
	}
	var typ, f, ch, fl C.uint
	var ptr C.CUdeviceptr
	var arr C.CUarray
	var w, h, pitch, size C.size_t
	if err := check("cuTexObjectGetResourceDesc", C.gc_tex_resource(c.ctx, C.ulonglong(obj), &typ, &ptr, &arr, &f, &ch, &w, &h,
		&pitch, &size, &fl)); err != nil {
		return backend.ResourceDesc{}, err
	}
	r := backend.ResourceDesc{Type: uint32(typ), Handle: uint64(ptr), Format: uint32(f), Channels: uint32(ch),
		Width: uint64(w), Height: uint64(h), Pitch: uint64(pitch), SizeBytes: uint64(size), Flags: uint32(fl)}
	if typ == 0 {
		for id, a := range t.arrays.m {
			if a == arr {
				r.Handle = uint64(id)
			}
		}
	}
	return r, nil
}

func (c *Context) SurfObjectCreate(r backend.ResourceDesc) (uint64, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	arr, err := t.arrays.get(backend.Handle(r.Handle))
	if err != nil || r.Type != 0 {
		return 0, fmt.Errorf("cuda: surface of resource type %d, array %d: %w", r.Type, r.Handle, backend.ErrInvalidValue)
	}
	var obj C.ulonglong
	err = check("cuSurfObjectCreate", C.gc_surf_create(c.ctx, &obj, arr))
	return uint64(obj), err
}

func (c *Context) SurfObjectDestroy(obj uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuSurfObjectDestroy", C.gc_surf_destroy(c.ctx, C.ulonglong(obj)))
}

// ---- graphs and capture ----

func (c *Context) StreamBeginCapture(stream backend.Handle, mode uint32) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	return check("cuStreamBeginCapture", C.gc_capture_begin(c.ctx, s, C.uint(mode)))
}

func (c *Context) StreamEndCapture(stream backend.Handle) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	s, err := c.stream(stream)
	if err != nil {
		return 0, err
	}
	var g C.CUgraph
	if err := check("cuStreamEndCapture", C.gc_capture_end(c.ctx, s, &g)); err != nil {
		return 0, err
	}
	return t.graphHandle(g), nil
}

func (c *Context) StreamCaptureInfo(stream backend.Handle) (backend.CaptureInfo, error) {
	s, err := c.stream(stream)
	if err != nil {
		return backend.CaptureInfo{}, err
	}
	var st C.uint
	var id C.ulonglong
	err = check("cuStreamGetCaptureInfo", C.gc_capture_info(c.ctx, s, &st, &id))
	return backend.CaptureInfo{Status: uint32(st), ID: uint64(id)}, err
}

func (c *Context) GraphCreate(flags uint32) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	var g C.CUgraph
	if err := check("cuGraphCreate", C.gc_graph_create(c.ctx, &g, C.uint(flags))); err != nil {
		return 0, err
	}
	return t.graphs.add(g), nil
}

func (c *Context) GraphDestroy(h backend.Handle) error {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return err
	}
	if err := t.ownedBody(h); err != nil {
		return err
	}
	if err := check("cuGraphDestroy", C.gc_graph_destroy(c.ctx, g)); err != nil {
		return err
	}
	t.dropBodies(h)
	t.graphs.remove(h)
	return nil
}

// nodeHandle names a driver node, giving it a handle the first time it is seen.
func (t *famTables) nodeHandle(n C.CUgraphNode) backend.Handle {
	if h, ok := t.nodeIDs[n]; ok {
		return h
	}
	h := t.nodes.add(n)
	t.nodeIDs[n] = h
	return h
}

// graphAndDeps resolves a graph and its dependencies into C memory (freed by the caller).
func (c *Context) graphAndDeps(h backend.Handle, deps []backend.Handle) (*famTables, C.CUgraph, *C.CUgraphNode, error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(deps) == 0 {
		return t, g, nil, nil
	}
	arr := (*C.CUgraphNode)(C.malloc(C.size_t(len(deps)) * C.size_t(unsafe.Sizeof(C.CUgraphNode(nil)))))
	ds := unsafe.Slice(arr, len(deps))
	for i, d := range deps {
		if ds[i], err = t.nodes.get(d); err != nil {
			C.free(unsafe.Pointer(arr))
			return nil, nil, nil, err
		}
	}
	return t, g, arr, nil
}

// addNode runs add with the graph and its dependencies and names the node it made.
func (c *Context) addNode(h backend.Handle, deps []backend.Handle, op string,
	add func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult) (backend.Handle, error) {
	t, g, d, err := c.graphAndDeps(h, deps)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(d))
	var node C.CUgraphNode
	if err := check(op, add(g, d, C.size_t(len(deps)), &node)); err != nil {
		return 0, err
	}
	return t.nodeHandle(node), nil
}

func dims(cfg backend.LaunchConfig) *C.uint {
	d := (*C.uint)(C.malloc(7 * 4))
	s := unsafe.Slice(d, 7)
	for i := range 3 {
		s[i], s[3+i] = C.uint(cfg.Grid[i]), C.uint(cfg.Block[i])
	}
	s[6] = C.uint(cfg.SharedMemBytes)
	return d
}

func (c *Context) GraphAddKernelNode(h backend.Handle, deps []backend.Handle, cfg backend.LaunchConfig) (backend.Handle, error) {
	f, err := c.function(cfg.Function)
	if err != nil {
		return 0, err
	}
	dm := dims(cfg)
	defer C.free(unsafe.Pointer(dm))
	params := C.CBytes(cfg.Params) // the driver copies them into the node
	defer C.free(params)
	return c.addNode(h, deps, "cuGraphAddKernelNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult {
		return C.gc_graph_kernel(c.ctx, out, g, d, n, f.ptr, dm, params, C.size_t(len(cfg.Params)))
	})
}

func (c *Context) GraphAddMemsetNode(h backend.Handle, deps []backend.Handle, p backend.MemsetNode) (backend.Handle, error) {
	return c.addNode(h, deps, "cuGraphAddMemsetNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult {
		return C.gc_graph_memset(c.ctx, out, g, d, n, C.CUdeviceptr(p.Dst), C.size_t(p.Pitch), C.uint(p.Value),
			C.uint(p.ElemSize), C.size_t(p.Width), C.size_t(p.Height))
	})
}

func (c *Context) GraphAddMemcpyNode(h backend.Handle, deps []backend.Handle, cp backend.Copy3D) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	if cp.Src.Kind == backend.SideHost || cp.Dst.Kind == backend.SideHost {
		return 0, fmt.Errorf("cuda: memcpy node with host memory (it lies in the guest): %w", backend.ErrNotSupported)
	}
	src, dst, err := c.copySides(t, cp, nil)
	if err != nil {
		return 0, err
	}
	sp := (*C.struct_gc_side)(C.malloc(C.size_t(2 * unsafe.Sizeof(src))))
	defer C.free(unsafe.Pointer(sp))
	sides := unsafe.Slice(sp, 2)
	sides[0], sides[1] = src, dst
	return c.addNode(h, deps, "cuGraphAddMemcpyNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult {
		return C.gc_graph_memcpy(c.ctx, out, g, d, n, &sides[0], &sides[1], C.size_t(cp.Width), C.size_t(cp.Height), C.size_t(cp.Depth))
	})
}

func (c *Context) GraphAddEmptyNode(h backend.Handle, deps []backend.Handle) (backend.Handle, error) {
	return c.addNode(h, deps, "cuGraphAddEmptyNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult {
		return C.gc_graph_empty(c.ctx, out, g, d, n)
	})
}

func (c *Context) GraphNodes(h backend.Handle) ([]backend.Handle, []uint32, error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return nil, nil, err
	}
	var n C.size_t
	if err := check("cuGraphGetNodes", C.gc_graph_nodes(c.ctx, g, nil, &n)); err != nil || n == 0 {
		return nil, nil, err
	}
	arr := (*C.CUgraphNode)(C.malloc(n * C.size_t(unsafe.Sizeof(C.CUgraphNode(nil)))))
	defer C.free(unsafe.Pointer(arr))
	if err := check("cuGraphGetNodes", C.gc_graph_nodes(c.ctx, g, arr, &n)); err != nil {
		return nil, nil, err
	}
	ids, kinds := make([]backend.Handle, n), make([]uint32, n)
	for i, node := range unsafe.Slice(arr, int(n)) {
		var k C.uint
		if err := check("cuGraphNodeGetType", C.gc_graph_node_type(c.ctx, node, &k)); err != nil {
			return nil, nil, err
		}
		ids[i], kinds[i] = t.nodeHandle(node), uint32(k)
	}
	return ids, kinds, nil
}

func (c *Context) GraphInstantiate(h backend.Handle, flags uint64) (backend.Handle, error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return 0, err
	}
	var x C.CUgraphExec
	if err := check("cuGraphInstantiateWithFlags", C.gc_graph_instantiate(c.ctx, &x, g, C.ulonglong(flags))); err != nil {
		return 0, err
	}
	return t.execs.add(x), nil
}

func (c *Context) GraphLaunch(e, stream backend.Handle) error {
	_, x, err := famGet(c, execsOf, e)
	if err != nil {
		return err
	}
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	return check("cuGraphLaunch", C.gc_graph_launch(c.ctx, x, s))
}

func (c *Context) GraphExecDestroy(e backend.Handle) error {
	t, x, err := famGet(c, execsOf, e)
	if err != nil {
		return err
	}
	if err := check("cuGraphExecDestroy", C.gc_graph_exec_destroy(c.ctx, x)); err != nil {
		return err
	}
	t.execs.remove(e)
	return nil
}

func (c *Context) GraphExecUpdate(e, h backend.Handle) (uint32, error) {
	t, x, err := famGet(c, execsOf, e)
	if err != nil {
		return 0, err
	}
	g, err := t.graphs.get(h)
	if err != nil {
		return 0, err
	}
	var r C.uint
	err = check("cuGraphExecUpdate", C.gc_graph_exec_update(c.ctx, x, g, &r))
	return uint32(r), err
}

// ---- launches with attributes ----

func (c *Context) LaunchKernelEx(cfg backend.LaunchConfig, ex backend.LaunchEx) error {
	s, err := c.stream(cfg.Stream)
	if err != nil {
		return err
	}
	f, err := c.function(cfg.Function)
	if err != nil {
		return err
	}
	dm := dims(cfg)
	defer C.free(unsafe.Pointer(dm))
	cl := (*C.uint)(C.malloc(3 * 4))
	defer C.free(unsafe.Pointer(cl))
	for i, v := range ex.Cluster {
		unsafe.Slice(cl, 3)[i] = C.uint(v)
	}
	params := C.CBytes(cfg.Params) // the driver copies the buffer before returning
	defer C.free(params)
	return check("cuLaunchKernelEx", C.gc_launch_ex(c.ctx, f.ptr, dm, s, C.int(boolInt(ex.Cooperative)), cl, C.int(ex.Priority),
		params, C.size_t(len(cfg.Params))))
}

// ---- stream memory operations ----

func (c *Context) StreamMemOp(stream backend.Handle, op uint32, addr, value uint64, flags uint32) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	return check("cuStreamWaitValue/WriteValue", C.gc_stream_mem_op(c.ctx, s, C.uint(op), C.CUdeviceptr(addr), C.ulonglong(value), C.uint(flags)))
}

// ---- tensor maps ----

// cArray copies vs into C memory of at least n elements (the driver reads rank of them).
func cArray[T any](vs []T, n int) unsafe.Pointer {
	var zero T
	p := C.calloc(C.size_t(max(n, len(vs), 1)), C.size_t(unsafe.Sizeof(zero)))
	copy(unsafe.Slice((*T)(p), max(n, len(vs))), vs)
	return p
}

func (c *Context) TensorMapEncode(p backend.TensorMapParams) ([128]byte, error) {
	var out [128]byte
	if err := c.live(); err != nil {
		return out, err
	}
	if p.Rank == 0 || p.Rank > 5 || len(p.GlobalDim) > 5 || len(p.GlobalStrides) > 5 || len(p.BoxDim) > 5 ||
		len(p.ElementStrides) > 5 || len(p.LowerCorner) > 5 || len(p.UpperCorner) > 5 {
		return out, fmt.Errorf("cuda: tensor map of rank %d: %w", p.Rank, backend.ErrInvalidValue)
	}
	m := C.aligned_alloc(128, 128)
	defer C.free(m)
	ptrs := []unsafe.Pointer{cArray(p.GlobalDim, 5), cArray(p.GlobalStrides, 5), cArray(p.BoxDim, 5),
		cArray(p.ElementStrides, 5), cArray(p.LowerCorner, 5), cArray(p.UpperCorner, 5)}
	defer func() {
		for _, q := range ptrs {
			C.free(q)
		}
	}()
	err := check("cuTensorMapEncode", C.gc_tensor_map(c.ctx, m, C.int(boolInt(p.Im2col)), C.uint(p.DataType), C.uint(p.Rank),
		C.CUdeviceptr(p.Address), (*C.ulonglong)(ptrs[0]), (*C.ulonglong)(ptrs[1]), (*C.uint)(ptrs[2]), (*C.uint)(ptrs[3]),
		(*C.int)(ptrs[4]), (*C.int)(ptrs[5]), C.uint(p.ChannelsPerPixel), C.uint(p.PixelsPerColumn), C.uint(p.Interleave),
		C.uint(p.Swizzle), C.uint(p.L2Promotion), C.uint(p.OOBFill)))
	copy(out[:], unsafe.Slice((*byte)(m), 128))
	return out, err
}

// ---- JIT linking ----

func (c *Context) LinkCreate() (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	var st unsafe.Pointer
	if err := check("cuLinkCreate", C.gc_link_create(c.ctx, &st)); err != nil {
		return 0, err
	}
	return t.links.add(st), nil
}

func (c *Context) LinkAddData(h backend.Handle, typ uint32, name string, data []byte) error {
	t, st, err := famGet(c, linksOf, h)
	if err != nil {
		return err
	}
	d := C.CBytes(data) // in C memory until the link is destroyed: the driver may keep reading it
	t.linkData[h] = append(t.linkData[h], d)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return check("cuLinkAddData", C.gc_link_add(c.ctx, st, C.int(typ), d, C.size_t(len(data)), cname))
}

func (c *Context) LinkComplete(h backend.Handle) ([]byte, error) {
	_, st, err := famGet(c, linksOf, h)
	if err != nil {
		return nil, err
	}
	var img unsafe.Pointer
	var n C.size_t
	if err := check("cuLinkComplete", C.gc_link_complete(c.ctx, st, &img, &n)); err != nil {
		return nil, err
	}
	return C.GoBytes(img, C.int(n)), nil
}

func (c *Context) LinkDestroy(h backend.Handle) error {
	t, st, err := famGet(c, linksOf, h)
	if err != nil {
		return err
	}
	if err := check("cuLinkDestroy", C.gc_link_destroy(c.ctx, st)); err != nil {
		return err
	}
	for _, d := range t.linkData[h] {
		C.free(d)
	}
	delete(t.linkData, h)
	t.links.remove(h)
	return nil
}

package cuda

/*
#include <stdlib.h>
#include "graphextras.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

var _ backend.GraphExtras = (*Context)(nil)

// graphExtras is what the CUDA 12 graph calls keep beyond famTables: which graphs are conditional
// bodies (owned by their node: not destroyed on their own, gone with their graph) and each
// conditional node's bodies, walked to size a graph's allocations; graph allocation addresses,
// which cuMemFreeAsync may free outside their graph.
type graphExtras struct {
	owner      map[backend.Handle]backend.Handle // body graph -> the graph holding its node
	condBodies map[C.CUgraphNode][]C.CUgraph
	allocs     map[uint64]bool
}

func (t *famTables) extras() *graphExtras {
	if t.ext == nil {
		t.ext = &graphExtras{owner: map[backend.Handle]backend.Handle{}, condBodies: map[C.CUgraphNode][]C.CUgraph{},
			allocs: map[uint64]bool{}}
	}
	return t.ext
}

// graphHandle names a driver graph, reusing the handle it has (a capture's graph is named when
// its capture is asked about, and again when the capture ends).
func (t *famTables) graphHandle(g C.CUgraph) backend.Handle {
	for h, v := range t.graphs.m {
		if v == g {
			return h
		}
	}
	return t.graphs.add(g)
}

// dropBodies forgets the body graphs that went with graph h.
func (t *famTables) dropBodies(h backend.Handle) {
	if t.ext == nil {
		return
	}
	for b, owner := range t.ext.owner {
		if owner == h {
			delete(t.ext.owner, b)
			t.dropBodies(b)
			t.graphs.remove(b)
		}
	}
}

// ownedBody refuses to destroy a conditional node's body on its own.
func (t *famTables) ownedBody(h backend.Handle) error {
	if t.ext != nil {
		if _, ok := t.ext.owner[h]; ok {
			return fmt.Errorf("cuda: graph %d is a conditional node's body (it goes with its node): %w", h, backend.ErrInvalidValue)
		}
	}
	return nil
}

func (c *Context) GraphConditionalHandleCreate(h backend.Handle, defaultValue, flags uint32) (uint64, error) {
	_, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return 0, err
	}
	var v C.ulonglong
	err = check("cuGraphConditionalHandleCreate", C.gc_cond_create(c.ctx, &v, g, C.uint(defaultValue), C.uint(flags)))
	return uint64(v), err
}

func (c *Context) GraphAddConditionalNode(h backend.Handle, deps []backend.Handle, p backend.ConditionalNode) (backend.Handle, []backend.Handle, error) {
	if !p.Valid() {
		return 0, nil, fmt.Errorf("cuda: conditional node of type %d with %d bodies: %w", p.Type, p.Size, backend.ErrInvalidValue)
	}
	out := (*C.CUgraph)(C.calloc(C.size_t(p.Size), C.size_t(unsafe.Sizeof(C.CUgraph(nil)))))
	defer C.free(unsafe.Pointer(out))
	var made C.CUgraphNode
	node, err := c.addNode(h, deps, "cuGraphAddNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, o *C.CUgraphNode) C.CUresult {
		r := C.gc_add_conditional(c.ctx, o, g, d, n, C.ulonglong(p.Handle), C.uint(p.Type), C.uint(p.Size), out)
		made = *o
		return r
	})
	if err != nil {
		return 0, nil, err
	}
	t := c.fam
	ext := t.extras()
	graphs := unsafe.Slice(out, int(p.Size))
	ext.condBodies[made] = append([]C.CUgraph(nil), graphs...)
	bodies := make([]backend.Handle, len(graphs))
	for i, g := range graphs {
		bodies[i] = t.graphs.add(g)
		ext.owner[bodies[i]] = h
	}
	return node, bodies, nil
}

func (c *Context) GraphAddMemAllocNode(h backend.Handle, deps []backend.Handle, p backend.AllocProps) (backend.Handle, uint64, error) {
	if p.LocationType != 1 || p.LocationID != 0 || p.HandleTypes != 0 {
		return 0, 0, fmt.Errorf("cuda: allocation node at %d/%d with handle types %#x: device memory of the current device, no IPC: %w",
			p.LocationType, p.LocationID, p.HandleTypes, backend.ErrInvalidValue)
	}
	var ptr C.CUdeviceptr
	node, err := c.addNode(h, deps, "cuGraphAddMemAllocNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, o *C.CUgraphNode) C.CUresult {
		return C.gc_add_mem_alloc(c.ctx, o, g, d, n, C.size_t(p.Size), C.uint(p.Type), C.uint(p.LocationType), C.int(c.dev), &ptr)
	})
	if err != nil {
		return 0, 0, err
	}
	c.fam.extras().allocs[uint64(ptr)] = true
	return node, uint64(ptr), nil
}

func (c *Context) GraphAddMemFreeNode(h backend.Handle, deps []backend.Handle, ptr uint64) (backend.Handle, error) {
	return c.addNode(h, deps, "cuGraphAddMemFreeNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, o *C.CUgraphNode) C.CUresult {
		return C.gc_add_mem_free(c.ctx, o, g, d, n, C.CUdeviceptr(ptr))
	})
}

// CUgraphNodeType numbers walked for allocations.
const (
	nodeTypeGraph       = 4
	nodeTypeMemAlloc    = 10
	nodeTypeConditional = 13
)

func (c *Context) GraphAllocBytes(h backend.Handle) (uint64, error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return 0, err
	}
	return c.allocBytes(t, g, 0)
}

// allocBytes sums g's allocation nodes, into child graphs and conditional bodies (depth-bounded:
// graphs nest a few levels, a cycle would be the driver's bug).
func (c *Context) allocBytes(t *famTables, g C.CUgraph, depth int) (uint64, error) {
	if depth > 64 {
		return 0, fmt.Errorf("cuda: graphs nested past 64 levels: %w", backend.ErrNotSupported)
	}
	var n C.size_t
	if err := check("cuGraphGetNodes", C.gc_graph_nodes(c.ctx, g, nil, &n)); err != nil || n == 0 {
		return 0, err
	}
	arr := (*C.CUgraphNode)(C.malloc(n * C.size_t(unsafe.Sizeof(C.CUgraphNode(nil)))))
	defer C.free(unsafe.Pointer(arr))
	if err := check("cuGraphGetNodes", C.gc_graph_nodes(c.ctx, g, arr, &n)); err != nil {
		return 0, err
	}
	var total uint64
	for _, node := range unsafe.Slice(arr, int(n)) {
		var k C.uint
		if err := check("cuGraphNodeGetType", C.gc_graph_node_type(c.ctx, node, &k)); err != nil {
			return 0, err
		}
		var sub []C.CUgraph
		switch k {
		case nodeTypeMemAlloc:
			var b C.size_t
			if err := check("cuGraphMemAllocNodeGetParams", C.gc_mem_alloc_node_bytes(c.ctx, node, &b)); err != nil {
				return 0, err
			}
			total = backend.SaturatingAdd(total, uint64(b))
		case nodeTypeGraph:
			var child C.CUgraph
			if err := check("cuGraphChildGraphNodeGetGraph", C.gc_child_graph(c.ctx, node, &child)); err != nil {
				return 0, err
			}
			sub = []C.CUgraph{child}
		case nodeTypeConditional:
			sub = t.extras().condBodies[node]
		}
		for _, s := range sub {
			b, err := c.allocBytes(t, s, depth+1)
			if err != nil {
				return 0, err
			}
			total = backend.SaturatingAdd(total, b)
		}
	}
	return total, nil
}

func (c *Context) DeviceGraphMemTrim() error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuDeviceGraphMemTrim", C.gc_graph_mem_trim(c.ctx, c.dev))
}

func (c *Context) DeviceGraphMemAttribute(attr uint32) (uint64, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var v C.ulonglong
	err := check("cuDeviceGetGraphMemAttribute", C.gc_graph_mem_get(c.ctx, c.dev, C.int(attr), &v))
	return uint64(v), err
}

func (c *Context) DeviceSetGraphMemAttribute(attr uint32, v uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuDeviceSetGraphMemAttribute", C.gc_graph_mem_set(c.ctx, c.dev, C.int(attr), C.ulonglong(v)))
}

func (c *Context) StreamBeginCaptureToGraph(stream, h backend.Handle, deps []backend.Handle, mode uint32) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	_, g, d, err := c.graphAndDeps(h, deps)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(d))
	return check("cuStreamBeginCaptureToGraph", C.gc_capture_to_graph(c.ctx, s, g, d, C.size_t(len(deps)), C.uint(mode)))
}

func (c *Context) StreamCaptureGraph(stream backend.Handle) (backend.CaptureGraph, error) {
	t, err := c.tables()
	if err != nil {
		return backend.CaptureGraph{}, err
	}
	s, err := c.stream(stream)
	if err != nil {
		return backend.CaptureGraph{}, err
	}
	var st C.uint
	var id C.ulonglong
	var g C.CUgraph
	var deps *C.CUgraphNode
	var n C.size_t
	if err := check("cuStreamGetCaptureInfo", C.gc_capture_graph(c.ctx, s, &st, &id, &g, &deps, &n)); err != nil {
		return backend.CaptureGraph{}, err
	}
	cg := backend.CaptureGraph{CaptureInfo: backend.CaptureInfo{Status: uint32(st), ID: uint64(id)}}
	if st != 1 || g == nil { // only an active capture has a graph and dependencies
		return cg, nil
	}
	cg.Graph = t.graphHandle(g)
	for _, node := range unsafe.Slice(deps, int(n)) {
		cg.Deps = append(cg.Deps, t.nodeHandle(node))
	}
	return cg, nil
}

func (c *Context) StreamUpdateCaptureDependencies(stream backend.Handle, deps []backend.Handle, flags uint32) error {
	t, err := c.tables()
	if err != nil {
		return err
	}
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	arr := (*C.CUgraphNode)(C.calloc(C.size_t(max(len(deps), 1)), C.size_t(unsafe.Sizeof(C.CUgraphNode(nil)))))
	defer C.free(unsafe.Pointer(arr))
	ds := unsafe.Slice(arr, max(len(deps), 1))
	for i, d := range deps {
		if ds[i], err = t.nodes.get(d); err != nil {
			return err
		}
	}
	return check("cuStreamUpdateCaptureDependencies", C.gc_update_capture_deps(c.ctx, s, arr, C.size_t(len(deps)), C.uint(flags)))
}

package cuda

/*
#include <stdlib.h>
#include "graphedits.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

var _ backend.GraphEdits = (*Context)(nil)

// maxHostFns bounds what one context keeps for host nodes (each add or capture keeps one).
const maxHostFns = 1 << 20

// hostToken keeps a host node's guest function; the node's argument here is the token (index+1).
func (t *famTables) hostToken(fn backend.HostFn) (C.ulonglong, error) {
	if fn.Fn == 0 {
		return 0, fmt.Errorf("cuda: host node without a function: %w", backend.ErrInvalidValue)
	}
	if len(t.hostFns) >= maxHostFns {
		return 0, fmt.Errorf("cuda: more than %d host nodes made: %w", maxHostFns, backend.ErrOutOfMemory)
	}
	t.hostFns = append(t.hostFns, fn)
	return C.ulonglong(len(t.hostFns)), nil
}

func (c *Context) GraphAddHostNode(h backend.Handle, deps []backend.Handle, fn backend.HostFn) (backend.Handle, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	tok, err := t.hostToken(fn)
	if err != nil {
		return 0, err
	}
	return c.addNode(h, deps, "cuGraphAddHostNode", func(g C.CUgraph, d *C.CUgraphNode, n C.size_t, out *C.CUgraphNode) C.CUresult {
		return C.gc_add_host(c.ctx, out, g, d, n, tok)
	})
}

func (c *Context) StreamCaptureHostFunc(stream backend.Handle, fn backend.HostFn) error {
	t, err := c.tables()
	if err != nil {
		return err
	}
	ci, err := c.StreamCaptureInfo(stream)
	if err != nil {
		return err
	}
	if ci.Status != 1 {
		return fmt.Errorf("cuda: host function on stream %d (capture status %d; only captured here): %w", stream, ci.Status, backend.ErrIllegalState)
	}
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	tok, err := t.hostToken(fn)
	if err != nil {
		return err
	}
	return check("cuLaunchHostFunc", C.gc_capture_host(c.ctx, s, tok))
}

func (c *Context) GraphHostNode(node backend.Handle) (backend.HostFn, error) {
	t, err := c.tables()
	if err != nil {
		return backend.HostFn{}, err
	}
	n, err := t.nodes.get(node)
	if err != nil {
		return backend.HostFn{}, err
	}
	var tok C.ulonglong
	if err := check("cuGraphHostNodeGetParams", C.gc_host_token(c.ctx, n, &tok)); err != nil {
		return backend.HostFn{}, err
	}
	if tok == 0 || int(tok) > len(t.hostFns) {
		return backend.HostFn{}, fmt.Errorf("cuda: node %d is no host node of the guest's: %w", node, backend.ErrInvalidValue)
	}
	return t.hostFns[tok-1], nil
}

func (c *Context) GraphEdges(h backend.Handle) (from, to []backend.Handle, err error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return nil, nil, err
	}
	var n C.size_t
	if err := check("cuGraphGetEdges", C.gc_graph_edges(c.ctx, g, nil, nil, &n)); err != nil || n == 0 {
		return nil, nil, err
	}
	size := C.size_t(unsafe.Sizeof(C.CUgraphNode(nil)))
	f, d := (*C.CUgraphNode)(C.malloc(n*size)), (*C.CUgraphNode)(C.malloc(n*size))
	defer C.free(unsafe.Pointer(f))
	defer C.free(unsafe.Pointer(d))
	if err := check("cuGraphGetEdges", C.gc_graph_edges(c.ctx, g, f, d, &n)); err != nil {
		return nil, nil, err
	}
	fs, ds := unsafe.Slice(f, int(n)), unsafe.Slice(d, int(n))
	for i := range fs {
		from, to = append(from, t.nodeHandle(fs[i])), append(to, t.nodeHandle(ds[i]))
	}
	return from, to, nil
}

func (c *Context) GraphClone(h backend.Handle) (backend.Handle, error) {
	t, g, err := famGet(c, graphsOf, h)
	if err != nil {
		return 0, err
	}
	var cl C.CUgraph
	if err := check("cuGraphClone", C.gc_graph_clone(c.ctx, &cl, g)); err != nil {
		return 0, err
	}
	return t.graphs.add(cl), nil
}

func (c *Context) GraphNodeFindInClone(node, clone backend.Handle) (backend.Handle, error) {
	t, cl, err := famGet(c, graphsOf, clone)
	if err != nil {
		return 0, err
	}
	orig, err := t.nodes.get(node)
	if err != nil {
		return 0, err
	}
	var n C.CUgraphNode
	if err := check("cuGraphNodeFindInClone", C.gc_find_in_clone(c.ctx, &n, orig, cl)); err != nil {
		return 0, err
	}
	return t.nodeHandle(n), nil
}

func (c *Context) GraphDestroyNode(node backend.Handle) error {
	t, err := c.tables()
	if err != nil {
		return err
	}
	n, err := t.nodes.get(node)
	if err != nil {
		return err
	}
	if err := check("cuGraphDestroyNode", C.gc_destroy_node(c.ctx, n)); err != nil {
		return err
	}
	t.nodes.remove(node)
	delete(t.nodeIDs, n) // the driver may hand the address to a new node
	return nil
}

// execAndNode resolves an executable graph and one of its graph's nodes.
func (c *Context) execAndNode(e, node backend.Handle) (*famTables, C.CUgraphExec, C.CUgraphNode, error) {
	t, x, err := famGet(c, execsOf, e)
	if err != nil {
		return nil, nil, nil, err
	}
	n, err := t.nodes.get(node)
	return t, x, n, err
}

func (c *Context) GraphExecKernelNodeSetParams(e, node backend.Handle, cfg backend.LaunchConfig) error {
	_, x, n, err := c.execAndNode(e, node)
	if err != nil {
		return err
	}
	f, err := c.function(cfg.Function)
	if err != nil {
		return err
	}
	dm := dims(cfg)
	defer C.free(unsafe.Pointer(dm))
	params := C.CBytes(cfg.Params) // the driver copies them
	defer C.free(params)
	return check("cuGraphExecKernelNodeSetParams", C.gc_exec_kernel(c.ctx, x, n, f.ptr, dm, params, C.size_t(len(cfg.Params))))
}

func (c *Context) GraphExecMemsetNodeSetParams(e, node backend.Handle, p backend.MemsetNode) error {
	_, x, n, err := c.execAndNode(e, node)
	if err != nil {
		return err
	}
	return check("cuGraphExecMemsetNodeSetParams", C.gc_exec_memset(c.ctx, x, n, C.CUdeviceptr(p.Dst), C.size_t(p.Pitch),
		C.uint(p.Value), C.uint(p.ElemSize), C.size_t(p.Width), C.size_t(p.Height)))
}

func (c *Context) GraphExecMemcpyNodeSetParams(e, node backend.Handle, cp backend.Copy3D) error {
	if cp.Src.Kind == backend.SideHost || cp.Dst.Kind == backend.SideHost {
		return fmt.Errorf("cuda: memcpy node with host memory (it lies in the guest): %w", backend.ErrNotSupported)
	}
	t, x, n, err := c.execAndNode(e, node)
	if err != nil {
		return err
	}
	src, dst, err := c.copySides(t, cp, nil)
	if err != nil {
		return err
	}
	sp := (*C.struct_gc_side)(C.malloc(C.size_t(2 * unsafe.Sizeof(src))))
	defer C.free(unsafe.Pointer(sp))
	sides := unsafe.Slice(sp, 2)
	sides[0], sides[1] = src, dst
	return check("cuGraphExecMemcpyNodeSetParams", C.gc_exec_memcpy(c.ctx, x, n, &sides[0], &sides[1], C.size_t(cp.Width),
		C.size_t(cp.Height), C.size_t(cp.Depth)))
}

package sim

import (
	"encoding/binary"
	"slices"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A clone has its own nodes (found from the original's), keeps edges and host functions; a
// destroyed node takes its edges with it; an executable graph's kernel node runs with new
// arguments while the graph's keeps its own.
func TestGraphEdits(t *testing.T) {
	_, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	fill := fillKernel(t, c)
	ptr := ok(c.MemAlloc(16))
	g := ok(c.GraphCreate(0))
	k := ok(c.GraphAddKernelNode(g, nil, backend.LaunchConfig{Function: fill, Grid: [3]uint32{1, 1, 1},
		Block: [3]uint32{4, 1, 1}, Params: fillParams(ptr, 9, 4)}))
	h := ok(c.GraphAddHostNode(g, []backend.Handle{k}, backend.HostFn{Fn: 0x1000, Data: 7}))
	e := ok(c.GraphAddEmptyNode(g, []backend.Handle{h}))
	wantCode(t, func() error { _, err := c.GraphAddHostNode(g, nil, backend.HostFn{}); return err }(), backend.ErrInvalidValue)

	cl := ok(c.GraphClone(g))
	kc, hc, ec := ok(c.GraphNodeFindInClone(k, cl)), ok(c.GraphNodeFindInClone(h, cl)), ok(c.GraphNodeFindInClone(e, cl))
	if kc == k || hc == h || ec == e {
		t.Fatalf("clone shares node ids: %d %d %d", kc, hc, ec)
	}
	if fn := ok(c.GraphHostNode(hc)); fn != (backend.HostFn{Fn: 0x1000, Data: 7}) {
		t.Fatalf("clone's host node: %+v", fn)
	}
	from, to, err := c.GraphEdges(cl)
	noErr(t, err)
	if !slices.Equal(from, []backend.Handle{kc, hc}) || !slices.Equal(to, []backend.Handle{hc, ec}) {
		t.Fatalf("clone's edges %v -> %v", from, to)
	}
	noErr(t, c.GraphDestroyNode(hc))
	from, _, err = c.GraphEdges(cl)
	noErr(t, err)
	if len(from) != 0 {
		t.Fatalf("edges left after destroying the node between: %v", from)
	}
	wantCode(t, func() error { _, err := c.GraphNodeFindInClone(h, cl); return err }(), backend.ErrInvalidValue)
	if ids, _, _ := c.GraphNodes(g); len(ids) != 3 {
		t.Fatalf("the original lost nodes: %v", ids)
	}

	x := ok(c.GraphInstantiate(cl, 0))
	noErr(t, c.GraphExecKernelNodeSetParams(x, kc, backend.LaunchConfig{Function: fill, Grid: [3]uint32{1, 1, 1},
		Block: [3]uint32{4, 1, 1}, Params: fillParams(ptr, 5, 4)}))
	wantCode(t, c.GraphExecKernelNodeSetParams(x, ec, backend.LaunchConfig{Function: fill, Grid: [3]uint32{1, 1, 1},
		Block: [3]uint32{4, 1, 1}, Params: fillParams(ptr, 5, 4)}), backend.ErrInvalidValue) // an empty node
	noErr(t, c.GraphLaunch(x, 0))
	noErr(t, c.StreamSynchronize(0))
	out := make([]byte, 16)
	noErr(t, c.MemcpyDtoH(out, ptr, 0, false))
	if binary.LittleEndian.Uint32(out) != 5 {
		t.Fatalf("the executable graph's new arguments: %v", out)
	}
	y := ok(c.GraphInstantiate(cl, 0)) // the graph kept its own
	noErr(t, c.GraphLaunch(y, 0))
	noErr(t, c.StreamSynchronize(0))
	noErr(t, c.MemcpyDtoH(out, ptr, 0, false))
	if binary.LittleEndian.Uint32(out) != 9 {
		t.Fatalf("the graph's own arguments: %v", out)
	}

	a := ok(c.GraphCreate(0))
	_, _, err = c.GraphAddMemAllocNode(a, nil, backend.AllocProps{Type: 1, LocationType: 1, Size: 4096})
	noErr(t, err)
	wantCode(t, func() error { _, err := c.GraphClone(a); return err }(), backend.ErrNotSupported)
}

// A captured host function and a change of the capture's dependencies need a stream that is
// capturing: an unknown stream is an invalid handle, a stream not capturing an illegal state; a
// host function chains after the capture's last node, and an invalidated capture takes none.
func TestCaptureCallsNeedACapture(t *testing.T) {
	_, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	s := ok(c.StreamCreate(0))
	fn := backend.HostFn{Fn: 0x1000, Data: 7}
	wantCode(t, c.StreamCaptureHostFunc(s+100, fn), backend.ErrInvalidHandle)
	wantCode(t, c.StreamUpdateCaptureDependencies(s+100, nil, 0), backend.ErrInvalidHandle)
	wantCode(t, c.StreamCaptureHostFunc(s, fn), backend.ErrIllegalState)
	wantCode(t, c.StreamUpdateCaptureDependencies(s, nil, 0), backend.ErrIllegalState)

	noErr(t, c.StreamBeginCapture(s, 1))
	wantCode(t, c.StreamCaptureHostFunc(s, backend.HostFn{}), backend.ErrInvalidValue)
	noErr(t, c.StreamCaptureHostFunc(s, fn))
	noErr(t, c.StreamCaptureHostFunc(s, fn))
	g := ok(c.StreamEndCapture(s))
	ids, kinds := must2(t, c, g)
	if !slices.Equal(kinds, []uint32{nodeHost, nodeHost}) {
		t.Fatalf("node kinds %v, want two host nodes", kinds)
	}
	from, to, err := c.GraphEdges(g)
	noErr(t, err)
	if !slices.Equal(from, ids[:1]) || !slices.Equal(to, ids[1:]) {
		t.Fatalf("edges %v -> %v, want %v -> %v", from, to, ids[:1], ids[1:])
	}

	noErr(t, c.StreamBeginCapture(s, 1))
	ptr := ok(c.MemAlloc(4))
	wantCode(t, c.MemcpyHtoD(ptr, []byte{1, 2, 3, 4}, s, true), backend.ErrStreamCaptureUnsupported)
	wantCode(t, c.StreamCaptureHostFunc(s, fn), backend.ErrStreamCaptureInvalidated)
	wantCode(t, func() error { _, err := c.StreamEndCapture(s); return err }(), backend.ErrStreamCaptureInvalidated)
}

package sim

import (
	"testing"

	"gpucloud/gpuserverd/backend"
)

// An allocation node's memory is the device's from the node's run until it is freed, comes from
// the graphs' pool (given back by a trim), and a graph whose allocation is still out cannot run.
func TestGraphMemoryLifetime(t *testing.T) {
	b, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	fill := fillKernel(t, c)
	g := ok(c.GraphCreate(0))
	props := backend.AllocProps{Type: 1, LocationType: 1, Size: 4 << 20}
	an, ptr, err := c.GraphAddMemAllocNode(g, nil, props)
	noErr(t, err)
	_, err = c.GraphAddKernelNode(g, []backend.Handle{an}, backend.LaunchConfig{Function: fill, Grid: [3]uint32{1, 1, 1},
		Block: [3]uint32{4, 1, 1}, Params: fillParams(ptr, 9, 4)})
	noErr(t, err)
	if n := ok(c.GraphAllocBytes(g)); n != 4<<20 {
		t.Fatalf("GraphAllocBytes = %d", n)
	}
	wantCode(t, c.MemcpyHtoD(ptr, []byte{1}, 0, false), backend.ErrInvalidValue) // nothing there yet
	x := ok(c.GraphInstantiate(g, 0))
	if free := b.free(0); free != 16<<20 {
		t.Fatalf("free after instantiate = %d: a graph holds memory only once launched", free)
	}
	noErr(t, c.GraphLaunch(x, 0))
	noErr(t, c.StreamSynchronize(0))
	out := make([]byte, 16)
	noErr(t, c.MemcpyDtoH(out, ptr, 0, false))
	if out[0] != 9 || out[12] != 9 {
		t.Fatalf("kernel output in graph memory: %v", out)
	}
	if free := b.free(0); free != 12<<20 {
		t.Fatalf("free with the allocation out = %d", free)
	}
	wantCode(t, c.GraphLaunch(x, 0), backend.ErrInvalidValue) // its allocation is not freed
	noErr(t, c.MemFree(ptr))
	if used := ok(c.DeviceGraphMemAttribute(backend.GraphMemUsed)); used != 0 {
		t.Fatalf("used after free = %d", used)
	}
	if free := b.free(0); free != 12<<20 {
		t.Fatalf("free before a trim = %d: the graphs' pool keeps freed memory", free)
	}
	noErr(t, c.DeviceGraphMemTrim())
	if free := b.free(0); free != 16<<20 {
		t.Fatalf("free after trim = %d", free)
	}
	noErr(t, c.GraphLaunch(x, 0)) // freed: it runs again
	noErr(t, c.StreamSynchronize(0))
	_, err = c.MemFreeAsync(ptr, 0) // in stream order, outside its graph
	noErr(t, err)
	noErr(t, c.StreamSynchronize(0))
	wantCode(t, c.MemFree(ptr), backend.ErrInvalidValue) // already freed
	if high := ok(c.DeviceGraphMemAttribute(backend.GraphMemReservedHigh)); high != 4<<20 {
		t.Fatalf("reserved high = %d", high)
	}
	wantCode(t, c.DeviceSetGraphMemAttribute(backend.GraphMemUsed, 0), backend.ErrInvalidValue)
	wantCode(t, c.DeviceSetGraphMemAttribute(backend.GraphMemReservedHigh, 1), backend.ErrInvalidValue)
	_, _, err = c.GraphAddMemAllocNode(g, nil, backend.AllocProps{Type: 1, LocationType: 1, HandleTypes: 1, Size: 64})
	wantCode(t, err, backend.ErrInvalidValue)
	_, err = c.GraphAddMemFreeNode(g, nil, ptr+8)
	wantCode(t, err, backend.ErrInvalidValue)
}

// Conditional nodes run their bodies by the handle's value; a handle's default is applied at each
// launch only when asked; bodies of a node go with its graph.
func TestConditionalNodes(t *testing.T) {
	_, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	mod := ok(c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel fill_u32\nkernel cond_countdown\n\x00")))
	fill := ok(c.ModuleGetFunction(mod, "fill_u32"))
	countdown := ok(c.ModuleGetFunction(mod, "cond_countdown"))
	counter := ok(c.MemAlloc(4))
	out := ok(c.MemAlloc(4))
	g := ok(c.GraphCreate(0))
	h := ok(c.GraphConditionalHandleCreate(g, 3, 1))
	_, err := c.GraphConditionalHandleCreate(g, 0, 2)
	wantCode(t, err, backend.ErrInvalidValue)
	_, _, err = c.GraphAddConditionalNode(g, nil, backend.ConditionalNode{Handle: h, Type: backend.CondWhile, Size: 2})
	wantCode(t, err, backend.ErrInvalidValue)
	_, _, err = c.GraphAddConditionalNode(g, nil, backend.ConditionalNode{Handle: h + 1, Type: backend.CondIf, Size: 1})
	wantCode(t, err, backend.ErrInvalidValue)
	_, bodies, err := c.GraphAddConditionalNode(g, nil, backend.ConditionalNode{Handle: h, Type: backend.CondSwitch, Size: 4})
	noErr(t, err)
	one := backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
	for i, body := range bodies {
		k := one
		k.Function, k.Params = fill, fillParams(out, uint32(100+i), 1)
		_, err := c.GraphAddKernelNode(body, nil, k)
		noErr(t, err)
	}
	wantCode(t, c.GraphDestroy(bodies[0]), backend.ErrInvalidValue)
	x := ok(c.GraphInstantiate(g, 0))
	// A body changed after instantiation does not change the executable graph.
	_, err = c.GraphAddEmptyNode(bodies[3], nil)
	noErr(t, err)
	noErr(t, c.GraphLaunch(x, 0))
	noErr(t, c.StreamSynchronize(0))
	got := make([]byte, 4)
	noErr(t, c.MemcpyDtoH(got, out, 0, false))
	if got[0] != 103 {
		t.Fatalf("switch on the default 3 ran body %d", int(got[0])-100)
	}
	noErr(t, c.GraphExecDestroy(x))
	noErr(t, c.GraphDestroy(g))
	if _, _, err := c.GraphNodes(bodies[1]); err == nil {
		t.Fatal("a body outlived its graph")
	}

	// WHILE on a handle without a default: the countdown before the loop sets it.
	w := ok(c.GraphCreate(0))
	hw := ok(c.GraphConditionalHandleCreate(w, 0, 0))
	k := one
	k.Function, k.Params = countdown, append(fillParams(counter, 0, 0)[:8], fillParams(hw, 0, 0)[:8]...)
	a := ok(c.GraphAddKernelNode(w, nil, k))
	_, wb, err := c.GraphAddConditionalNode(w, []backend.Handle{a}, backend.ConditionalNode{Handle: hw, Type: backend.CondWhile, Size: 1})
	noErr(t, err)
	_, err = c.GraphAddKernelNode(wb[0], nil, k)
	noErr(t, err)
	xw := ok(c.GraphInstantiate(w, 0))
	noErr(t, c.MemcpyHtoD(counter, []byte{7, 0, 0, 0}, 0, false))
	noErr(t, c.GraphLaunch(xw, 0))
	noErr(t, c.StreamSynchronize(0))
	noErr(t, c.MemcpyDtoH(got, counter, 0, false))
	if got[0] != 0 {
		t.Fatalf("counter after the loop = %d", got[0])
	}
}

// A capture into an existing graph adds after the given nodes; the dependency set can be read and
// replaced; a captured stream-ordered allocation becomes an allocation node.
func TestCaptureIntoGraph(t *testing.T) {
	_, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	s := ok(c.StreamCreate(0))
	g := ok(c.GraphCreate(0))
	e := ok(c.GraphAddEmptyNode(g, nil))
	wantCode(t, c.StreamBeginCaptureToGraph(s, g, []backend.Handle{e + 100}, 0), backend.ErrInvalidValue)
	noErr(t, c.StreamBeginCaptureToGraph(s, g, []backend.Handle{e}, 0))
	wantCode(t, c.GraphDestroy(g), backend.ErrIllegalState)
	ptr := ok(c.MemAllocAsync(64, s, 0))
	cg := ok(c.StreamCaptureGraph(s))
	if cg.Graph != g || cg.Status != 1 || len(cg.Deps) != 1 {
		t.Fatalf("capture info %+v", cg)
	}
	_, err := c.MemFreeAsync(ptr, s)
	noErr(t, err)
	wantCode(t, c.StreamUpdateCaptureDependencies(s, []backend.Handle{e}, 2), backend.ErrInvalidValue)
	noErr(t, c.StreamUpdateCaptureDependencies(s, []backend.Handle{e}, 1))
	cg = ok(c.StreamCaptureGraph(s))
	if len(cg.Deps) != 1 || cg.Deps[0] != e {
		t.Fatalf("deps after set: %v", cg.Deps)
	}
	if got := ok(c.StreamEndCapture(s)); got != g {
		t.Fatalf("end of capture into %d gave %d", g, got)
	}
	_, kinds := must2(t, c, g)
	want := []uint32{nodeEmpty, nodeMemAlloc, nodeMemFree}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("node kinds %v, want %v", kinds, want)
	}
	if n := ok(c.GraphAllocBytes(g)); n != 64 {
		t.Fatalf("GraphAllocBytes = %d", n)
	}
}

package sim

import (
	"encoding/binary"
	"errors"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// ok returns v, panicking on err (a failed test's trace names the call).
func ok[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, want backend.Result) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %d", err, want)
	}
}

func fillKernel(t *testing.T, c *Context) backend.Handle {
	t.Helper()
	mod := ok(c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel fill_u32\n\x00")))
	return ok(c.ModuleGetFunction(mod, "fill_u32"))
}

func fillParams(ptr uint64, v uint32, n int32) []byte {
	p := binary.LittleEndian.AppendUint64(nil, ptr)
	p = binary.LittleEndian.AppendUint32(p, v)
	return binary.LittleEndian.AppendUint32(p, uint32(n))
}

// A physical allocation lives until its handle and its mappings are gone; its memory is the
// device's until then, and the mapping is usable only once access is set.
func TestVirtualMemoryLifetime(t *testing.T) {
	b, bc := newCtx(t, 16<<20)
	c := bc.(*Context)
	va := ok(c.MemAddressReserve(4<<20, 0, 0, 0))
	h := ok(c.MemCreate(backend.AllocProps{Type: 1, LocationType: 1, Size: 4 << 20}, 0))
	if free := b.free(0); free != 12<<20 {
		t.Fatalf("free after create = %d", free)
	}
	if err := c.MemMap(va, 4<<20, 0, h, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.MemcpyHtoD(va, []byte{1}, 0, false), backend.ErrIllegalAddress)
	if err := c.MemSetAccess(va, 4<<20, 1, 0, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyHtoD(va+100, []byte{7, 8}, 0, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.MemFree(va), backend.ErrInvalidValue) // a mapping is not cuMemAlloc's
	if err := c.MemRelease(h); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 2)
	if err := c.MemcpyDtoH(out, va+100, 0, false); err != nil || out[0] != 7 || out[1] != 8 {
		t.Fatalf("read through the mapping after release: %v %v", out, err)
	}
	if free := b.free(0); free != 12<<20 {
		t.Fatalf("released while mapped: free = %d", free)
	}
	wantCode(t, c.MemAddressFree(va, 4<<20), backend.ErrInvalidValue)
	if err := c.MemUnmap(va, 4<<20); err != nil {
		t.Fatal(err)
	}
	if free := b.free(0); free != 16<<20 {
		t.Fatalf("free after unmap = %d", free)
	}
	if err := c.MemAddressFree(va, 4<<20); err != nil {
		t.Fatal(err)
	}
	_, err := c.MemCreate(backend.AllocProps{Type: 1, LocationType: 1, Size: 32 << 20}, 0)
	wantCode(t, err, backend.ErrOutOfMemory)
}

// A pool keeps freed memory up to its release threshold until trimmed.
func TestPoolThresholdAndTrim(t *testing.T) {
	b, bc := newCtx(t, 64<<20)
	c := bc.(*Context)
	p := ok(c.MemPoolCreate(backend.PoolProps{AllocType: 1, LocationType: 1}))
	if err := c.MemPoolSetAttribute(p, poolReleaseThreshold, 8<<20); err != nil {
		t.Fatal(err)
	}
	a := ok(c.MemAllocAsync(6<<20, 0, p))
	x := ok(c.MemAllocAsync(6<<20, 0, p))
	for _, q := range []uint64{a, x} {
		if n, err := c.MemFreeAsync(q, 0); err != nil || n != 6<<20 {
			t.Fatalf("free = %d, %v", n, err)
		}
	}
	if err := c.StreamSynchronize(0); err != nil {
		t.Fatal(err)
	}
	if r := ok(c.MemPoolGetAttribute(p, poolReservedCurrent)); r != 8<<20 {
		t.Fatalf("reserved after frees = %d, want the threshold", r)
	}
	if h := ok(c.MemPoolGetAttribute(p, poolUsedHigh)); h != 12<<20 {
		t.Fatalf("used high = %d", h)
	}
	if err := c.MemPoolTrimTo(p, 0); err != nil {
		t.Fatal(err)
	}
	if free := b.free(0); free != 64<<20 {
		t.Fatalf("free after trim = %d", free)
	}
	_, err := c.MemFreeAsync(a, 0)
	wantCode(t, err, backend.ErrInvalidValue)
}

// Work captured on a stream runs only when the graph is launched, once per launch.
func TestCaptureAndReplay(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	fill := fillKernel(t, c)
	s := ok(c.StreamCreate(0))
	p := ok(c.MemAlloc(1024))
	if err := c.StreamBeginCapture(s, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.StreamBeginCapture(s, 0), backend.ErrIllegalState)
	if err := c.Memset(p, 0x01010101, 4, 256, s, true); err != nil {
		t.Fatal(err)
	}
	if err := c.LaunchKernel(backend.LaunchConfig{Function: fill, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{64, 1, 1},
		Stream: s, Params: fillParams(p, 5, 64)}); err != nil {
		t.Fatal(err)
	}
	g := ok(c.StreamEndCapture(s))
	out := make([]byte, 1024)
	noErr(t, c.MemcpyDtoH(out, p, 0, false))
	if out[0] != 0 || out[1020] != 0 {
		t.Fatal("captured work ran at capture")
	}
	ids, kinds := must2(t, c, g)
	if len(ids) != 2 || kinds[0] != nodeMemset || kinds[1] != nodeKernel {
		t.Fatalf("nodes %v kinds %v", ids, kinds)
	}
	x := ok(c.GraphInstantiate(g, 0))
	for range 2 {
		noErr(t, c.Memset(p, 0, 1, 1024, 0, false))
		noErr(t, c.GraphLaunch(x, s))
		noErr(t, c.StreamSynchronize(s))
		noErr(t, c.MemcpyDtoH(out, p, 0, false))
		if binary.LittleEndian.Uint32(out) != 5 || out[1020] != 1 {
			t.Fatalf("after launch: %v %v", out[:4], out[1020:])
		}
	}
	// Host copies cannot be captured and void the capture.
	noErr(t, c.StreamBeginCapture(s, 0))
	wantCode(t, c.MemcpyHtoD(p, []byte{1}, s, true), backend.ErrStreamCaptureUnsupported)
	_, err := c.StreamEndCapture(s)
	wantCode(t, err, backend.ErrStreamCaptureInvalidated)
	wantCode(t, c.StreamBeginCapture(0, 0), backend.ErrStreamCaptureUnsupported)
}

func must2(t *testing.T, c *Context, g backend.Handle) ([]backend.Handle, []uint32) {
	t.Helper()
	ids, kinds, err := c.GraphNodes(g)
	if err != nil {
		t.Fatal(err)
	}
	return ids, kinds
}

// Explicit graphs: dependencies must be nodes of the graph; an update needs the same shape.
func TestGraphBuildAndUpdate(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	p := ok(c.MemAlloc(64))
	g := ok(c.GraphCreate(0))
	m := ok(c.GraphAddMemsetNode(g, nil, backend.MemsetNode{Dst: p, Value: 7, ElemSize: 1, Width: 64, Height: 1}))
	if _, err := c.GraphAddEmptyNode(g, []backend.Handle{m + 1000}); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("foreign dependency: %v", err)
	}
	ok(c.GraphAddEmptyNode(g, []backend.Handle{m}))
	x := ok(c.GraphInstantiate(g, 0))
	g2 := ok(c.GraphCreate(0))
	ok(c.GraphAddMemsetNode(g2, nil, backend.MemsetNode{Dst: p, Value: 9, ElemSize: 1, Width: 64, Height: 1}))
	r, err := c.GraphExecUpdate(x, g2)
	if r != 2 || !errors.Is(err, backend.ErrGraphExecUpdateFailure) {
		t.Fatalf("update with another shape = %d, %v", r, err)
	}
	m2 := ok(c.GraphAddEmptyNode(g2, nil))
	_ = m2
	r, err = c.GraphExecUpdate(x, g2)
	if r != 2 || err == nil { // the empty node depends on nothing: not the same edges
		t.Fatalf("update with other edges = %d, %v", r, err)
	}
	g3 := ok(c.GraphCreate(0))
	m3 := ok(c.GraphAddMemsetNode(g3, nil, backend.MemsetNode{Dst: p, Value: 9, ElemSize: 1, Width: 64, Height: 1}))
	ok(c.GraphAddEmptyNode(g3, []backend.Handle{m3}))
	if r, err := c.GraphExecUpdate(x, g3); r != 0 || err != nil {
		t.Fatalf("update = %d, %v", r, err)
	}
	noErr(t, c.GraphLaunch(x, 0))
	out := make([]byte, 64)
	noErr(t, c.MemcpyDtoH(out, p, 0, false))
	if out[0] != 9 || out[63] != 9 {
		t.Fatalf("updated graph wrote %v", out[:2])
	}
}

// 3-D copies address rows by pitch and slices by height; boxes outside an array are refused.
func TestArrayCopies(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	a := ok(c.ArrayCreate(backend.ArrayDesc{Width: 4, Height: 3, Depth: 2, Format: 0x01, Channels: 2}))
	host := make([]byte, 8*3*2)
	for i := range host {
		host[i] = byte(i)
	}
	noErr(t, c.Memcpy3D(backend.Copy3D{Src: backend.CopySide{Kind: backend.SideHost},
		Dst: backend.CopySide{Kind: backend.SideArray, Ptr: uint64(a)}, Width: 8, Height: 3, Depth: 2, Host: host}))
	out := make([]byte, 2)
	noErr(t, c.Memcpy3D(backend.Copy3D{Src: backend.CopySide{Kind: backend.SideArray, Ptr: uint64(a), X: 6, Y: 2, Z: 1},
		Dst: backend.CopySide{Kind: backend.SideHost}, Width: 2, Height: 1, Depth: 1, Host: out}))
	if out[0] != 24+16+6 || out[1] != 24+16+7 {
		t.Fatalf("element (3, 2, 1) = %v", out)
	}
	err := c.Memcpy3D(backend.Copy3D{Src: backend.CopySide{Kind: backend.SideArray, Ptr: uint64(a), X: 7},
		Dst: backend.CopySide{Kind: backend.SideHost}, Width: 2, Height: 1, Depth: 1, Host: out})
	wantCode(t, err, backend.ErrInvalidValue)
	_, err = c.ArrayCreate(backend.ArrayDesc{Width: 4, Depth: 2, Format: 0x01, Channels: 1})
	wantCode(t, err, backend.ErrInvalidValue)
}

// A cooperative launch must fit on the device at once.
func TestCooperativeLaunchFits(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	fill := fillKernel(t, c)
	p := ok(c.MemAlloc(4096))
	cfg := backend.LaunchConfig{Function: fill, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: fillParams(p, 1, 1024)}
	noErr(t, c.LaunchKernelEx(cfg, backend.LaunchEx{Cooperative: true}))
	cfg.Grid[0] = 100000
	wantCode(t, c.LaunchKernelEx(cfg, backend.LaunchEx{Cooperative: true}), backend.ErrCooperativeLaunchTooLarge)
	cfg.Grid[0] = 6
	wantCode(t, c.LaunchKernelEx(cfg, backend.LaunchEx{Cluster: [3]uint32{4, 1, 1}}), backend.ErrInvalidValue)
}

// A stream waiting on a word runs nothing after the wait until another stream writes it.
func TestStreamMemOps(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	flag := ok(c.MemAlloc(64))
	a, b := ok(c.StreamCreate(1)), ok(c.StreamCreate(1))
	noErr(t, c.StreamMemOp(a, backend.MemOpWait32, flag, 3, 1)) // EQ
	noErr(t, c.StreamMemOp(a, backend.MemOpWrite64, flag+8, 9, 0))
	wantCode(t, c.StreamQuery(a), backend.ErrNotReady)
	noErr(t, c.StreamMemOp(b, backend.MemOpWrite32, flag, 3, 0))
	noErr(t, c.StreamSynchronize(a))
	out := make([]byte, 8)
	noErr(t, c.MemcpyDtoH(out, flag+8, 0, false))
	if binary.LittleEndian.Uint64(out) != 9 {
		t.Fatalf("write after the wait: %v", out)
	}
	wantCode(t, c.StreamMemOp(a, backend.MemOpWait64, flag+4, 1, 0), backend.ErrInvalidValue) // misaligned
	for _, tc := range []struct {
		cond       uint32
		size       uint64
		have, want uint64
		met        bool
	}{
		{0, 4, 1, 0xffffffff, true}, // GEQ wraps
		{0, 4, 5, 6, false},
		{2, 8, 6, 4, true},           // AND
		{3, 4, 0xfffffffe, 0, true},  // NOR: bit 0 clear in both
		{3, 4, 0xffffffff, 0, false}, // NOR: every bit set in one
	} {
		if got := waitMet(tc.cond, tc.size, tc.have, tc.want); got != tc.met {
			t.Errorf("waitMet(%d, %d, %#x, %#x) = %v", tc.cond, tc.size, tc.have, tc.want, got)
		}
	}
}

// Tensor maps are checked as NVIDIA documents and encoded deterministically.
func TestTensorMapChecks(t *testing.T) {
	_, bc := newCtx(t, 1<<20)
	c := bc.(*Context)
	p := backend.TensorMapParams{DataType: 7, Rank: 2, Address: 0x7f2c00000000, GlobalDim: []uint64{64, 64},
		GlobalStrides: []uint64{256}, BoxDim: []uint32{32, 32}, ElementStrides: []uint32{1, 1}, Swizzle: 3}
	a := ok(c.TensorMapEncode(p))
	if b := ok(c.TensorMapEncode(p)); a != b {
		t.Fatal("two encodings of the same map differ")
	}
	for name, mutate := range map[string]func(*backend.TensorMapParams){
		"misaligned address":              func(q *backend.TensorMapParams) { q.Address += 4 },
		"stride off 16":                   func(q *backend.TensorMapParams) { q.GlobalStrides = []uint64{100} },
		"box over 256":                    func(q *backend.TensorMapParams) { q.BoxDim = []uint32{32, 512} },
		"inner box past the swizzle span": func(q *backend.TensorMapParams) { q.BoxDim = []uint32{64, 32} },
		"rank 6":                          func(q *backend.TensorMapParams) { q.Rank = 6 },
		"im2col of rank 2":                func(q *backend.TensorMapParams) { q.Im2col = true },
	} {
		q := p
		mutate(&q)
		if _, err := c.TensorMapEncode(q); !errors.Is(err, backend.ErrInvalidValue) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

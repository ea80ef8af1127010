package sim

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
)

func newCtx(t *testing.T, mem uint64) (*Backend, backend.Context) {
	t.Helper()
	b := New(1, mem)
	c, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestRegisteredAsSimulated(t *testing.T) {
	b, err := backend.Open(Kind)
	if err != nil || b.Kind() != "simulated" {
		t.Fatalf("Open(simulated) = %v, %v", b, err)
	}
}

func TestMemoryCopiesAndBounds(t *testing.T) {
	b, c := newCtx(t, 1<<20)
	p, err := c.MemAlloc(1000)
	if err != nil || p < addressBase {
		t.Fatalf("alloc = %#x, %v", p, err)
	}
	if err := c.MemcpyHtoD(p+8, []byte{1, 2, 3, 4}, 0, false); err != nil {
		t.Fatal(err)
	}
	q, _ := c.MemAlloc(16)
	if err := c.MemcpyDtoD(q, p+8, 4, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Memset(q+4, 0xaabb, 2, 2, 0, false); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 8)
	if err := c.MemcpyDtoH(out, q, 0, false); err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 2, 3, 4, 0xbb, 0xaa, 0xbb, 0xaa}; string(out) != string(want) {
		t.Fatalf("device bytes %v, want %v", out, want)
	}
	if err := c.MemcpyHtoD(p+999, []byte{1, 2}, 0, false); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("copy past the end: %v", err)
	}
	if _, err := c.MemAlloc(2 << 20); !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("over capacity: %v", err)
	}
	if free, total, _ := c.MemGetInfo(); total != 1<<20 || free != 1<<20-1016 {
		t.Fatalf("meminfo free %d total %d", free, total)
	}
	if err := c.MemFree(p + 8); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("free of interior pointer: %v", err)
	}
	c.Close()
	if free := b.free(0); free != 1<<20 {
		t.Fatalf("after Close %d bytes still held", 1<<20-free)
	}
}

func TestKernelsAndStreams(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	mod, err := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel vector_add_f32\nkernel spin\nglobal counter 4\n\x00"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModuleGetFunction(mod, "nope"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("unknown kernel: %v", err)
	}
	add, _ := c.ModuleGetFunction(mod, "vector_add_f32")
	layout, _ := c.ParamLayout(add)
	if len(layout) != 4 || layout[3].Offset != 24 {
		t.Fatalf("layout %+v", layout)
	}
	a, _ := c.MemAlloc(12)
	bb, _ := c.MemAlloc(12)
	out, _ := c.MemAlloc(12)
	c.MemcpyHtoD(a, f32s(1, 2, 3), 0, false)
	c.MemcpyHtoD(bb, f32s(10, 20, 30), 0, false)
	params := make([]byte, 28)
	binary.LittleEndian.PutUint64(params[0:], a)
	binary.LittleEndian.PutUint64(params[8:], bb)
	binary.LittleEndian.PutUint64(params[16:], out)
	binary.LittleEndian.PutUint32(params[24:], 3)

	// A spin on a stream keeps it busy: the query says not ready, the event completes after.
	spinF, _ := c.ModuleGetFunction(mod, "spin")
	s, _ := c.StreamCreate(0)
	ev, _ := c.EventCreate(0)
	sp := make([]byte, 8)
	binary.LittleEndian.PutUint64(sp, uint64(50*time.Millisecond))
	one := [3]uint32{1, 1, 1}
	if err := c.LaunchKernel(backend.LaunchConfig{Function: spinF, Grid: one, Block: one, Stream: s, Params: sp}); err != nil {
		t.Fatal(err)
	}
	if err := c.LaunchKernel(backend.LaunchConfig{Function: add, Grid: one, Block: [3]uint32{32, 1, 1}, Stream: s, Params: params}); err != nil {
		t.Fatal(err)
	}
	c.EventRecord(ev, s)
	if err := c.StreamQuery(s); !errors.Is(err, backend.ErrNotReady) {
		t.Fatalf("busy stream query: %v", err)
	}
	if err := c.EventQuery(ev); !errors.Is(err, backend.ErrNotReady) {
		t.Fatalf("pending event query: %v", err)
	}
	if err := c.EventSynchronize(ev); err != nil {
		t.Fatal(err)
	}
	untimed, _ := c.EventCreate(0x2)
	c.EventRecord(untimed, s)
	c.EventSynchronize(untimed)
	if _, err := c.EventElapsedTime(ev, untimed); !errors.Is(err, backend.ErrInvalidHandle) {
		t.Fatalf("elapsed time of an untimed event: %v", err)
	}
	got := make([]byte, 12)
	c.MemcpyDtoH(got, out, 0, false)
	if string(got) != string(f32s(11, 22, 33)) {
		t.Fatalf("vector_add gave %v", got)
	}
	// A kernel touching unallocated memory fails at the next synchronisation, and stays failed.
	binary.LittleEndian.PutUint64(params[16:], 0x1000)
	if err := c.LaunchKernel(backend.LaunchConfig{Function: add, Grid: one, Block: [3]uint32{32, 1, 1}, Params: params}); err != nil {
		t.Fatalf("launch returns before running: %v", err)
	}
	if err := c.Synchronize(); !errors.Is(err, backend.ErrIllegalAddress) {
		t.Fatalf("sync after bad kernel: %v", err)
	}
}

func TestModuleImages(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	ptx := ".version 8.0\n.target sm_90\n.visible .entry saxpy_f32(\n.param .f32 a)\n{}\n"
	m, err := c.ModuleLoadData([]byte(ptx))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModuleGetFunction(m, "saxpy_f32"); err != nil {
		t.Fatalf("PTX entry: %v", err)
	}
	for _, bad := range []string{"\x7fELF garbage", "GPUSIM-MODULE 1\nglobal g -4\n", "GPUSIM-MODULE 1\nwhat\n",
		"GPUSIM-MODULE 1\nglobal g\n", "GPUSIM-MODULE 1\nglobal g 4 shared\n", "GPUSIM-MODULE 1\nglobal g 4 managed x\n",
		"GPUSIM-MODULE 1\nglobal g 4 managed 1 2\n"} {
		if _, err := c.ModuleLoadData([]byte(bad)); !errors.Is(err, backend.ErrInvalidImage) {
			t.Errorf("image %q: %v", bad, err)
		}
	}
}

// A managed global starts with its initial value and says it is managed; a plain one does not.
func TestManagedGlobals(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	m, err := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nglobal v 4 managed 300\nglobal p 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	mg := c.(backend.ManagedGlobals)
	for name, want := range map[string]bool{"v": true, "p": false} {
		ptr, n, err := c.ModuleGetGlobal(m, name)
		if err != nil || n != 4 {
			t.Fatalf("%s: %d bytes, %v", name, n, err)
		}
		if managed, err := mg.IsManaged(ptr); err != nil || managed != want {
			t.Errorf("%s managed: %v %v, want %v", name, managed, err, want)
		}
		b := make([]byte, 4)
		if err := c.MemcpyDtoH(b, ptr, 0, false); err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint32(b); want && v != 300 || !want && v != 0 {
			t.Errorf("%s starts as %d", name, v)
		}
	}
}

// The legacy default stream orders against blocking streams but not against non-blocking ones.
func TestDefaultStreamSemantics(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	mod, _ := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel spin\n"))
	spinF, _ := c.ModuleGetFunction(mod, "spin")
	sp := make([]byte, 8)
	binary.LittleEndian.PutUint64(sp, uint64(80*time.Millisecond))
	one := [3]uint32{1, 1, 1}
	blocking, _ := c.StreamCreate(0)
	nonBlocking, _ := c.StreamCreate(1)
	p, _ := c.MemAlloc(4)

	c.LaunchKernel(backend.LaunchConfig{Function: spinF, Grid: one, Block: one, Stream: blocking, Params: sp})
	start := time.Now()
	if err := c.Memset(p, 1, 4, 1, 0, false); err != nil { // on stream 0: waits for the spin
		t.Fatal(err)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Fatalf("default-stream memset did not wait for the blocking stream (%v)", d)
	}
	long := make([]byte, 8)
	binary.LittleEndian.PutUint64(long, uint64(400*time.Millisecond))
	c.LaunchKernel(backend.LaunchConfig{Function: spinF, Grid: one, Block: one, Stream: nonBlocking, Params: long})
	c.Memset(p, 2, 4, 1, 0, false)
	// Had the memset waited, the non-blocking stream would be idle by now.
	if err := c.StreamQuery(nonBlocking); !errors.Is(err, backend.ErrNotReady) {
		t.Fatalf("default-stream memset waited for a non-blocking stream: query %v", err)
	}
}

// Host registration behaves as the driver's: an overlapping range is refused, an unknown one
// cannot be unregistered, and a range is free to register again once unregistered.
func TestHostRegister(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	buf := make([]byte, 64<<10)
	if err := c.HostRegister(buf); err != nil {
		t.Fatal(err)
	}
	if err := c.HostRegister(buf[4096:8192]); backend.ResultOf(err) != backend.ErrHostAlreadyRegistered {
		t.Fatalf("overlapping register: %v", err)
	}
	if err := c.HostRegister(nil); backend.ResultOf(err) != backend.ErrInvalidValue {
		t.Fatalf("empty register: %v", err)
	}
	if err := c.HostUnregister(buf[4096:]); backend.ResultOf(err) != backend.ErrHostNotRegistered {
		t.Fatalf("unregister of an inner range: %v", err)
	}
	if err := c.HostUnregister(buf); err != nil {
		t.Fatal(err)
	}
	if err := c.HostRegister(buf[:4096]); err != nil {
		t.Fatalf("register after unregister: %v", err)
	}
	if n := c.(*Context).Registered(); n != 1 {
		t.Fatalf("%d ranges registered, want 1", n)
	}
}

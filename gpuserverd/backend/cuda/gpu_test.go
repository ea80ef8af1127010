package cuda

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// The tests below need a GPU. They skip only when libcuda.so.1 cannot be loaded at all; a driver
// that loads but then fails (no device, bad context) fails the test.

//go:embed testdata/axpy.ptx
var axpyPTX []byte

func openGPU(t *testing.T) *Backend {
	t.Helper()
	if err := load(LibraryName); err != nil {
		if strings.Contains(err.Error(), "cannot open shared object") || strings.Contains(err.Error(), "No such file") {
			t.Skipf("libcuda.so.1 is absent on this machine (%v): the real-GPU tests run on the GPU machine via scripts/gpu-run.sh", err)
		}
		t.Fatal(err)
	}
	current = t
	b, err := Open()
	if err != nil {
		t.Fatalf("Open with libcuda.so.1 present: %v", err)
	}
	return b
}

func newCtx(t *testing.T, b *Backend) *Context {
	t.Helper()
	c, err := b.NewContext(0)
	if err != nil {
		t.Fatalf("NewContext(0): %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c.(*Context)
}

// current is the running GPU test, so that must can wrap a call's two results (Go cannot pass
// f()'s results and another argument together). The GPU tests never run in parallel.
var current *testing.T

func must[T any](v T, err error) T {
	current.Helper()
	if err != nil {
		current.Fatal(err)
	}
	return v
}

func must2(a, b uint64, err error) (uint64, uint64) {
	current.Helper()
	if err != nil {
		current.Fatal(err)
	}
	return a, b
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code backend.Result) {
	t.Helper()
	if got := backend.ResultOf(err); got != code {
		t.Fatalf("got %v (code %d), want code %d", err, got, code)
	}
}

func TestGPUDevices(t *testing.T) {
	b := openGPU(t)
	v := must(b.DriverVersion())
	if v < 12000 {
		t.Errorf("driver version %d, want >= 12000", v)
	}
	devs := must(b.Devices())
	if len(devs) == 0 {
		t.Fatal("no devices")
	}
	uuidRE := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	busRE := regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)
	for _, d := range devs {
		t.Logf("device %d: %s %s %d bytes sm_%d%d %s", d.Ordinal, d.Name, d.UUID, d.TotalMemory, d.Major, d.Minor, d.PCIBusID)
		if d.Name == "" || !uuidRE.MatchString(d.UUID) || d.TotalMemory < 1<<30 || d.Major < 5 || !busRE.MatchString(d.PCIBusID) {
			t.Errorf("implausible device %+v", d)
		}
	}
	// CU_DEVICE_ATTRIBUTE_WARP_SIZE is 32 on every NVIDIA GPU.
	if w := must(b.DeviceAttribute(0, 10)); w != 32 {
		t.Errorf("warp size %d", w)
	}
	_, err := b.DeviceAttribute(len(devs), 10)
	wantCode(t, err, backend.ErrInvalidDevice)
	_, err = b.NewContext(-1)
	wantCode(t, err, backend.ErrInvalidDevice)
}

func TestGPUMemoryAndCopies(t *testing.T) {
	c := newCtx(t, openGPU(t))
	free, total := must2(c.MemGetInfo())
	if free == 0 || free > total {
		t.Fatalf("MemGetInfo free=%d total=%d", free, total)
	}
	const n = 4 << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(rand.Uint32())
	}
	a := must(c.MemAlloc(n))
	bb := must(c.MemAlloc(n))
	ok(t, c.MemcpyHtoD(a, src, 0, false))
	ok(t, c.MemcpyDtoD(bb, a, n, 0, false))
	got := make([]byte, n)
	ok(t, c.MemcpyDtoH(got, bb, 0, false))
	if !bytes.Equal(got, src) {
		t.Fatal("H2D -> D2D -> D2H round trip changed the data")
	}
	// Allocation shows up in the driver's accounting.
	free2, _ := must2(c.MemGetInfo())
	if free2 >= free {
		t.Errorf("free memory %d did not drop below %d after allocating", free2, free)
	}
	ok(t, c.MemFree(a))
	ok(t, c.MemFree(bb))
	if c.MemFree(bb) == nil {
		t.Fatal("double free succeeded")
	}
	_, err := c.MemAlloc(1 << 50)
	wantCode(t, err, backend.ErrOutOfMemory)
}

func TestGPUMemsets(t *testing.T) {
	c := newCtx(t, openGPU(t))
	const n = 1 << 16
	p := must(c.MemAlloc(n))
	got := make([]byte, n)
	for _, tc := range []struct {
		elem  int
		value uint32
		want  []byte // one element, little-endian
	}{
		{1, 0x1ab, []byte{0xab}},
		{2, 0x1234cdef, []byte{0xef, 0xcd}},
		{4, 0xdeadbeef, []byte{0xef, 0xbe, 0xad, 0xde}},
	} {
		ok(t, c.Memset(p, 0, 1, n, 0, false))
		count := uint64(n/tc.elem) - 1 // leave the last element untouched
		ok(t, c.Memset(p, tc.value, tc.elem, count, 0, tc.elem == 2))
		ok(t, c.MemcpyDtoH(got, p, 0, false))
		want := append(bytes.Repeat(tc.want, int(count)), make([]byte, tc.elem)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("memset elem=%d value=%#x: wrong contents", tc.elem, tc.value)
		}
	}
	wantCode(t, c.Memset(p, 0, 3, 1, 0, false), backend.ErrInvalidValue)
}

func TestGPUPinnedAsyncOnStream(t *testing.T) {
	c := newCtx(t, openGPU(t))
	const n = 8 << 20
	host := must(c.HostAlloc(n))
	back := must(c.HostAlloc(n))
	for i := range host {
		host[i] = byte(i * 7)
	}
	s := must(c.StreamCreate(1)) // CU_STREAM_NON_BLOCKING
	p := must(c.MemAlloc(n))
	ok(t, c.MemcpyHtoD(p, host, s, true))
	ok(t, c.MemcpyDtoH(back, p, s, true))
	ok(t, c.StreamSynchronize(s))
	ok(t, c.StreamQuery(s))
	if !bytes.Equal(host, back) {
		t.Fatal("async pinned round trip changed the data")
	}
	ok(t, c.HostFree(back))
	wantCode(t, c.HostFree(back), backend.ErrInvalidValue)
	wantCode(t, c.HostFree(make([]byte, 16)), backend.ErrInvalidValue)
	ok(t, c.StreamDestroy(s))
	wantCode(t, c.StreamSynchronize(s), backend.ErrInvalidHandle)
	// host stays allocated: Close must free it.
}

func packAxpy(y, x uint64, a float32, n uint32) []byte {
	buf := make([]byte, 24)
	binary.LittleEndian.PutUint64(buf[0:], y)
	binary.LittleEndian.PutUint64(buf[8:], x)
	binary.LittleEndian.PutUint32(buf[16:], math.Float32bits(a))
	binary.LittleEndian.PutUint32(buf[20:], n)
	return buf
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func floatBytes(f []float32) []byte {
	out := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func TestGPUModuleLaunchAndParamLayout(t *testing.T) {
	c := newCtx(t, openGPU(t))
	m := must(c.ModuleLoadData(axpyPTX))
	f := must(c.ModuleGetFunction(m, "axpy"))
	layout := must(c.ParamLayout(f))
	want := []backend.Param{{Offset: 0, Size: 8}, {Offset: 8, Size: 8}, {Offset: 16, Size: 4}, {Offset: 20, Size: 4}}
	if len(layout) != len(want) {
		t.Fatalf("ParamLayout = %v, want %v", layout, want)
	}
	for i := range want {
		if layout[i] != want[i] {
			t.Fatalf("ParamLayout = %v, want %v", layout, want)
		}
	}
	empty := must(c.ModuleGetFunction(m, "empty"))
	if l := must(c.ParamLayout(empty)); len(l) != 0 {
		t.Fatalf("empty kernel has layout %v", l)
	}
	// CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	if v := must(c.FuncGetAttribute(f, 0)); v < 256 {
		t.Errorf("max threads per block %d", v)
	}

	const n = 100_000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), float32(2*i)
	}
	dx := must(c.MemAlloc(4 * n))
	dy := must(c.MemAlloc(4 * n))
	ok(t, c.MemcpyHtoD(dx, floatBytes(x), 0, false))
	ok(t, c.MemcpyHtoD(dy, floatBytes(y), 0, false))
	g, gsize := must2(c.ModuleGetGlobal(m, "launches"))
	if gsize != 4 {
		t.Fatalf("global size %d, want 4", gsize)
	}
	ok(t, c.MemcpyHtoD(g, []byte{40, 0, 0, 0}, 0, false))

	start := must(c.EventCreate(0))
	end := must(c.EventCreate(0))
	ok(t, c.EventRecord(start, 0))
	cfg := backend.LaunchConfig{Function: f, Grid: [3]uint32{(n + 255) / 256, 1, 1}, Block: [3]uint32{256, 1, 1},
		Params: packAxpy(dy, dx, 0.5, n)}
	ok(t, c.LaunchKernel(cfg))
	ok(t, c.LaunchKernel(cfg))
	ok(t, c.EventRecord(end, 0))
	ok(t, c.EventSynchronize(end))
	ok(t, c.EventQuery(end))
	if ms := must(c.EventElapsedTime(start, end)); ms < 0 || ms > 10_000 {
		t.Errorf("elapsed %v ms", ms)
	}
	out := make([]byte, 4*n)
	ok(t, c.MemcpyDtoH(out, dy, 0, false))
	for i, v := range floats(out) {
		if w := y[i] + 2*0.5*x[i]; v != w {
			t.Fatalf("y[%d] = %v, want %v", i, v, w)
		}
	}
	cnt := make([]byte, 4)
	ok(t, c.MemcpyDtoH(cnt, g, 0, false))
	if got := binary.LittleEndian.Uint32(cnt); got != 42 {
		t.Fatalf("global after two launches = %d, want 42", got)
	}

	// Errors: a short parameter buffer is refused before the driver sees it; stale handles too.
	short := cfg
	short.Params = cfg.Params[:20]
	wantCode(t, c.LaunchKernel(short), backend.ErrInvalidValue)
	_, err := c.ModuleGetFunction(m, "no_such_kernel")
	wantCode(t, err, backend.ErrNotFound)
	ok(t, c.ModuleUnload(m))
	wantCode(t, c.LaunchKernel(cfg), backend.ErrInvalidHandle)
	_, err = c.ModuleGetFunction(m, "axpy")
	wantCode(t, err, backend.ErrInvalidHandle)
	_, err = c.ModuleLoadData([]byte("this is not a module"))
	if backend.ResultOf(err) == backend.Success || backend.ResultOf(err) == backend.ErrUnknown {
		t.Fatalf("loading garbage: %v", err)
	}
	t.Logf("garbage module: %v", err)
}

func TestGPUStreamsAndEventsOrder(t *testing.T) {
	c := newCtx(t, openGPU(t))
	m := must(c.ModuleLoadData(axpyPTX))
	f := must(c.ModuleGetFunction(m, "axpy"))
	s1 := must(c.StreamCreate(1))
	s2 := must(c.StreamCreate(1))
	ev := must(c.EventCreate(2)) // CU_EVENT_DISABLE_TIMING
	const n = 1 << 20
	host := must(c.HostAlloc(4 * n))
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	copy(host, floatBytes(ones))
	dx := must(c.MemAlloc(4 * n))
	dy := must(c.MemAlloc(4 * n))
	ok(t, c.Memset(dy, 0, 4, n, s2, true))
	ok(t, c.StreamSynchronize(s2))
	// s1 fills x; s2 waits on the event, then computes y += 3x. Without the wait y would race.
	ok(t, c.MemcpyHtoD(dx, host, s1, true))
	ok(t, c.EventRecord(ev, s1))
	ok(t, c.StreamWaitEvent(s2, ev))
	ok(t, c.LaunchKernel(backend.LaunchConfig{Function: f, Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1},
		Stream: s2, Params: packAxpy(dy, dx, 3, n)}))
	ok(t, c.StreamSynchronize(s2))
	out := make([]byte, 4*n)
	ok(t, c.MemcpyDtoH(out, dy, 0, false))
	for i, v := range floats(out) {
		if v != 3 {
			t.Fatalf("y[%d] = %v, want 3", i, v)
		}
	}
	ok(t, c.Synchronize())
	ok(t, c.EventDestroy(ev))
	wantCode(t, c.EventQuery(ev), backend.ErrInvalidHandle)
	wantCode(t, c.StreamWaitEvent(s2, ev), backend.ErrInvalidHandle)
	wantCode(t, c.EventRecord(s1, s2), backend.ErrInvalidHandle) // a stream id is not an event
}

// A session's goroutine may run on any OS thread, and several contexts share a process's threads;
// every call must still reach its own context.
func TestGPUContextsAcrossThreads(t *testing.T) {
	b := openGPU(t)
	c1, c2 := newCtx(t, b), newCtx(t, b)
	p1 := must(c1.MemAlloc(1 << 20))
	p2 := must(c2.MemAlloc(1 << 20))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runtime.LockOSThread() // a fresh thread per goroutine: each call must bind its context itself
			defer runtime.UnlockOSThread()
			c, p := c1, p1
			if i%2 == 1 {
				c, p = c2, p2
			}
			buf := bytes.Repeat([]byte{byte(i)}, 1<<20)
			errs <- errors.Join(c.MemcpyHtoD(p, buf, 0, false), c.Synchronize())
		}(i)
		wg.Wait() // one goroutine at a time per context, as the interface promises
	}
	close(errs)
	for err := range errs {
		ok(t, err)
	}
	got := make([]byte, 1)
	ok(t, c1.MemcpyDtoH(got, p1, 0, false))
	if got[0] != 2 {
		t.Fatalf("context 1 holds %d, want 2", got[0])
	}
	ok(t, c2.MemcpyDtoH(got, p2, 0, false))
	if got[0] != 3 {
		t.Fatalf("context 2 holds %d, want 3", got[0])
	}
}

func TestGPUCloseFreesAndRefuses(t *testing.T) {
	b := openGPU(t)
	probe := newCtx(t, b)
	before, _ := must2(probe.MemGetInfo())
	cc := must(b.NewContext(0))
	c := cc.(*Context)
	_ = must(c.MemAlloc(1 << 30))
	_ = must(c.HostAlloc(1 << 20))
	during, _ := must2(probe.MemGetInfo())
	if during > before-(1<<30) {
		t.Fatalf("free %d while a context holds 1 GiB, was %d", during, before)
	}
	ok(t, c.Close())
	after, _ := must2(probe.MemGetInfo())
	if after < before-(256<<20) {
		t.Fatalf("free %d after Close, was %d before: memory leaked", after, before)
	}
	_, err := c.MemAlloc(1)
	wantCode(t, err, backend.ErrInvalidContext)
	ok(t, c.Close()) // idempotent
}

package cuda

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A context imaged, closed and restored on the GPU hands out the same handles and addresses:
// its allocations (a large one with a mapping of its own, small ones sharing a slab) hold what
// was written back, the module's function and global work through their old handle and address,
// and a stream and event made before are usable. Needs a GPU (the GPU machine's cuda.test).
func TestGPUCheckpointRestoreSameAddresses(t *testing.T) {
	b := openGPU(t)
	cc, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*Context)
	const n = 1 << 20 // 4 MiB of floats: its own mapping
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%1000), float32(3*(i%777))
	}
	dx := must(c.MemAlloc(4 * n))
	dy := must(c.MemAlloc(4 * n))
	small := must(c.MemAlloc(100))
	ok(t, c.MemcpyHtoD(dx, floatBytes(x), 0, false))
	ok(t, c.MemcpyHtoD(dy, floatBytes(y), 0, false))
	ok(t, c.MemcpyHtoD(small, []byte("checkpointed"), 0, false))
	m := must(c.ModuleLoadData(axpyPTX))
	f := must(c.ModuleGetFunction(m, "axpy"))
	s := must(c.StreamCreate(1))
	e := must(c.EventCreate(2))
	g, _ := must2(c.ModuleGetGlobal(m, "launches"))
	ok(t, c.MemcpyHtoD(g, []byte{7, 0, 0, 0}, 0, false))

	if !Movable {
		t.Skip("needs GPUSERVERD_MOVABLE_MEMORY=1")
	}
	if in := g >= c.mem.base && g < c.mem.base+c.mem.size; !in || len(c.modules.m[m].pinned) != 1 {
		t.Fatalf("global at %#x, not pinned in the session's range [%#x, +%d) (the driver placed it: %s)",
			g, c.mem.base, c.mem.size, c.modules.m[m].placedBy)
	}
	img := must(c.Image())
	if img.Reserved[1] == 0 || len(img.Regions) != 4 || img.NextHandle < e {
		t.Fatalf("image: reserved %v, %d regions, next handle %d", img.Reserved, len(img.Regions), img.NextHandle)
	}
	r := closeAndRestore(t, b, c, img)
	cfg := backend.LaunchConfig{Function: f, Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1},
		Params: packAxpy(dy, dx, 2, n), Stream: s}
	ok(t, r.LaunchKernel(cfg))
	ok(t, r.EventRecord(e, s))
	ok(t, r.EventSynchronize(e))
	out := make([]byte, 4*n)
	ok(t, r.MemcpyDtoH(out, dy, 0, false))
	for i, v := range floats(out) {
		if w := y[i] + 2*x[i]; v != w {
			t.Fatalf("y[%d] = %v after the restore, want %v", i, v, w)
		}
	}
	word := make([]byte, 12)
	ok(t, r.MemcpyDtoH(word, small, 0, false))
	cnt := make([]byte, 4)
	ok(t, r.MemcpyDtoH(cnt, g, 0, false))
	if string(word) != "checkpointed" || binary.LittleEndian.Uint32(cnt) != 8 {
		t.Fatalf("small allocation %q, global %d (want 8)", word, binary.LittleEndian.Uint32(cnt))
	}
	// New objects take handles past the old ones; new memory lands where the source's would.
	if h := must(r.StreamCreate(0)); h <= img.NextHandle-1 {
		t.Fatalf("new stream handle %d, the image's next was %d", h, img.NextHandle)
	}
	ok(t, r.MemFree(small))
	if p := must(r.MemAlloc(64)); p != small {
		t.Errorf("a small allocation after a free lands at %#x, want %#x", p, small)
	}
}

// A PTX module's global pinned in the session's range starts with its initial value, is what its
// kernels use (a launch counts in it), and goes back to the range with its unload.
func TestGPUPinnedGlobalKeepsInitialValueAndIsTheKernels(t *testing.T) {
	if !Movable {
		t.Skip("needs GPUSERVERD_MOVABLE_MEMORY=1")
	}
	c := newCtx(t, openGPU(t))
	ptx := strings.Replace(string(axpyPTX), ".u32 launches;", ".u32 launches = 41;", 1)
	m := must(c.ModuleLoadData([]byte(ptx)))
	g, n := must2(c.ModuleGetGlobal(m, "launches"))
	if p := c.modules.m[m].pinned; len(p) != 1 || p["launches"] != [2]uint64{g, n} {
		t.Fatalf("pinned %v, global at %#x (%d bytes); the driver placed it: %s", p, g, n, c.modules.m[m].placedBy)
	}
	t.Logf("global pinned at %#x: %s", g, c.modules.m[m].pinnedBy)
	cnt := make([]byte, 4)
	ok(t, c.MemcpyDtoH(cnt, g, 0, false))
	if v := binary.LittleEndian.Uint32(cnt); v != 41 {
		t.Fatalf("pinned global starts at %d, want its initializer 41", v)
	}
	f := must(c.ModuleGetFunction(m, "axpy"))
	d := must(c.MemAlloc(4 * 256))
	ok(t, c.LaunchKernel(backend.LaunchConfig{Function: f, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: packAxpy(d, d, 1, 256)}))
	ok(t, c.Synchronize())
	ok(t, c.MemcpyDtoH(cnt, g, 0, false))
	if v := binary.LittleEndian.Uint32(cnt); v != 42 {
		t.Fatalf("after a launch the pinned global holds %d, want 42: the kernel used another address", v)
	}
	if held := c.heldGlobals(); held != "" {
		t.Fatalf("a pinned global counts as held: %s", held)
	}
	ok(t, c.ModuleUnload(m))
	if _, ok := c.mem.sizes[g]; ok {
		t.Fatalf("the pinned global %#x is still allocated after the unload", g)
	}
}

// A global the driver placed (here: PTX the rewrite leaves alone) does not keep a session from
// moving until the program asks for its address; then the image is refused, naming it and why.
func TestGPUImageRefusesAHeldDriverPlacedGlobal(t *testing.T) {
	if !Movable {
		t.Skip("needs GPUSERVERD_MOVABLE_MEMORY=1")
	}
	c := newCtx(t, openGPU(t))
	ptx := strings.Replace(string(axpyPTX), ".visible .global .align 4 .u32 launches;", ".global .align 4 .u32 launches, spare;", 1)
	m := must(c.ModuleLoadData([]byte(ptx)))
	if _, err := c.Image(); err != nil {
		t.Fatalf("image before the program asked for a global: %v", err)
	}
	must2(c.ModuleGetGlobal(m, "launches"))
	_, err := c.Image()
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), `global "launches" of module`) ||
		!strings.Contains(err.Error(), "several variables") {
		t.Fatalf("image with a held driver-placed global: %v", err)
	}
}

// State the driver cannot rebuild is refused by name, and the context goes on.
func TestGPUCheckpointRefusesGraphs(t *testing.T) {
	c := newCtx(t, openGPU(t))
	g := must(c.GraphCreate(0))
	_, err := c.Image()
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "CUDA graphs") {
		t.Fatalf("image with a graph: %v", err)
	}
	ok(t, c.GraphDestroy(g))
	if _, err := c.Image(); err != nil {
		t.Fatalf("image after the graph went: %v", err)
	}
}

// Every mapping of the session's range is exported as a file (the memory a migration on the
// same GPU hands over): a large allocation's own mapping and the slab of the small ones.
func TestGPUExportMemoryCoversEveryMapping(t *testing.T) {
	if !Movable {
		t.Skip("needs GPUSERVERD_MOVABLE_MEMORY=1")
	}
	c := newCtx(t, openGPU(t))
	big := must(c.MemAlloc(4 << 20))
	small := must(c.MemAlloc(100))
	maps, err := c.ExportMemory()
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	defer func() {
		for _, m := range maps {
			m.File.Close()
		}
	}()
	got := map[uint64]uint64{}
	for _, m := range maps {
		if m.File == nil || m.File.Fd() == ^uintptr(0) {
			t.Fatalf("mapping %#x without a descriptor", m.Addr)
		}
		got[m.Addr] = m.Bytes
	}
	slab := small &^ (c.mem.gran - 1)
	if len(got) != 2 || got[big] != 4<<20 || got[slab] != c.mem.gran {
		t.Fatalf("exported %v; want %#x (4 MiB) and the slab %#x (%d bytes)", got, big, slab, c.mem.gran)
	}
}

// A fat binary's globals, which the driver places (__device__ counter and state, __constant__
// mult: gputests/globalkernels.cu), never asked for by the program, come back after a restore
// with what the kernel left in them, wherever the new load put them. Needs a GPU (sm_90).
func TestGPUDriverPlacedGlobalsComeBackWithTheirContents(t *testing.T) {
	if !Movable {
		t.Skip("needs GPUSERVERD_MOVABLE_MEMORY=1")
	}
	b := openGPU(t)
	cc, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	c := cc.(*Context)
	image, err := base64.StdEncoding.DecodeString(nvccFatbinCompressed)
	if err != nil {
		t.Fatal(err)
	}
	m := must(c.ModuleLoadData(image))
	f := must(c.ModuleGetFunction(m, "step"))
	out := must(c.MemAlloc(257 * 8))
	cfg := backend.LaunchConfig{Function: f, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: binary.LittleEndian.AppendUint64(nil, out)}
	// The host's model of thread 0: state = state*mult[0] + counter, then counter++.
	state, counter := uint64(1), uint64(0)
	stepModel := func() { state, counter = state*6364136223846793005+counter, counter+1 }
	for range 3 {
		ok(t, c.LaunchKernel(cfg))
		stepModel()
	}
	ok(t, c.Synchronize())
	img := must(c.Image())
	if got := img.Modules[0].Contents; len(got["counter"]) != 8 || len(got["state"]) != 256*8 || len(got["mult"]) != 4*8 {
		t.Fatalf("the image carries %d globals of the module (counter %d, state %d, mult %d bytes); its module was placed by: %s",
			len(got), len(got["counter"]), len(got["state"]), len(got["mult"]), c.modules.m[m].placedBy)
	}
	r := closeAndRestore(t, b, c, img)
	ok(t, r.LaunchKernel(cfg))
	stepModel()
	got := make([]byte, 257*8)
	ok(t, r.MemcpyDtoH(got, out, 0, false))
	if s, n := binary.LittleEndian.Uint64(got), binary.LittleEndian.Uint64(got[256*8:]); s != state || n != counter {
		t.Fatalf("after 3 steps, a restore and 1 more: state[0] %#x, counter %d; want %#x and %d", s, n, state, counter)
	}
}

// closeAndRestore reads the regions of c's image, closes c (its range is free again in this
// process, as in a fresh one), restores the image and writes the regions back, as a worker does.
func closeAndRestore(t *testing.T, b *Backend, c *Context, img *backend.ContextImage) *Context {
	t.Helper()
	contents := map[uint64][]byte{}
	for _, r := range img.Regions {
		buf := make([]byte, r.Bytes)
		ok(t, c.MemcpyDtoH(buf, r.Addr, 0, false))
		contents[r.Addr] = buf
	}
	ok(t, c.Close())
	rc, err := b.RestoreContext(0, img)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	r := rc.(*Context)
	t.Cleanup(func() { r.Close() })
	for a, buf := range contents {
		ok(t, r.MemcpyHtoD(a, buf, 0, false))
	}
	return r
}

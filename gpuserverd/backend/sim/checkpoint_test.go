package sim

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A context imaged and restored in another backend (another process's) keeps its handles and
// addresses: the restored one runs the same kernel on the same pointers with the same result, and
// hands out new handles and addresses that collide with none of the old.
func TestImageRestoreKeepsHandlesAndAddresses(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	mod, _ := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel vector_add_f32\nglobal counter 4\n"))
	add, _ := c.ModuleGetFunction(mod, "vector_add_f32")
	if err := c.FuncSetAttribute(add, attrMaxDynamicShared, 65536); err != nil {
		t.Fatal(err)
	}
	a, _ := c.MemAlloc(12)
	bb, _ := c.MemAlloc(12)
	out, _ := c.MemAlloc(12)
	s, _ := c.StreamCreate(1)
	ev, _ := c.EventCreate(0x2)
	bl, _ := c.BlasCreate()
	c.BlasSetStream(bl, s)
	img, err := c.(backend.Checkpointer).Image()
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Regions) != 4 || !img.Regions[0].Global {
		t.Fatalf("regions %+v: want the global and three allocations", img.Regions)
	}

	b2 := New(1, 1<<20)
	r, err := b2.RestoreContext(0, img)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.MemcpyHtoD(a, f32s(1, 2, 3), 0, false)
	r.MemcpyHtoD(bb, f32s(10, 20, 30), 0, false)
	params := make([]byte, 28)
	binary.LittleEndian.PutUint64(params[0:], a)
	binary.LittleEndian.PutUint64(params[8:], bb)
	binary.LittleEndian.PutUint64(params[16:], out)
	binary.LittleEndian.PutUint32(params[24:], 3)
	one := [3]uint32{1, 1, 1}
	if err := r.LaunchKernel(backend.LaunchConfig{Function: add, Grid: one, Block: [3]uint32{32, 1, 1}, Stream: s, Params: params, SharedMemBytes: 60000}); err != nil {
		t.Fatal(err)
	}
	if err := r.EventRecord(ev, s); err != nil {
		t.Fatal(err)
	}
	if _, err := r.EventElapsedTime(ev, ev); !errors.Is(err, backend.ErrInvalidHandle) {
		t.Fatalf("the restored event lost its disable-timing flag: %v", err)
	}
	got := make([]byte, 12)
	if err := r.MemcpyDtoH(got, out, s, false); err != nil || string(got) != string(f32s(11, 22, 33)) {
		t.Fatalf("kernel on the restored context: %v, %v", got, err)
	}
	if err := r.BlasDestroy(bl); err != nil {
		t.Fatalf("restored cuBLAS handle: %v", err)
	}
	p, size, err := r.ModuleGetGlobal(mod, "counter")
	if err != nil || p != img.Regions[0].Addr || size != 4 {
		t.Fatalf("global after restore: %#x %d %v", p, size, err)
	}
	n, _ := r.MemAlloc(8)
	if n <= out {
		t.Fatalf("new allocation %#x at or below the restored %#x", n, out)
	}
	if h, _ := r.StreamCreate(0); h < img.NextHandle {
		t.Fatalf("new stream %d reuses a handle below %d", h, img.NextHandle)
	}
	if free, _, _ := r.MemGetInfo(); free != 1<<20-4-3*12-8 {
		t.Fatalf("restored backend's free memory %d does not count the regions", free)
	}
}

func TestImageRefusesWhatItCannotRebuild(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	c.(*Context).DnnCreate()
	_, err := c.(backend.Checkpointer).Image()
	if !errors.Is(err, backend.ErrNotSupported) || err == nil || !strings.Contains(err.Error(), "cuDNN") {
		t.Fatalf("image of a context with a cuDNN handle: %v", err)
	}
}

// A context imaged on one device comes back on another (a move to another GPU of the same
// model, as the chaos test's drains make): same addresses, its memory charged to the new device.
func TestRestoreOnAnotherDevice(t *testing.T) {
	b := New(2, 1<<20)
	c, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.MemAlloc(16)
	c.MemcpyHtoD(p, []byte("moved to gpu one"), 0, false)
	img, err := c.(backend.Checkpointer).Image()
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.RestoreContext(1, img)
	if err != nil {
		t.Fatalf("restore on device 1: %v", err)
	}
	defer r.Close()
	if err := r.MemcpyHtoD(p, []byte("moved to gpu one"), 0, false); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if err := r.MemcpyDtoH(got, p, 0, false); err != nil || string(got) != "moved to gpu one" {
		t.Fatalf("at %#x on device 1: %q %v", p, got, err)
	}
	if q, err := r.MemAlloc(16); err != nil || q == p {
		t.Fatalf("a new allocation after the restore: %#x %v", q, err)
	}
	if b.free(1) >= 1<<20 {
		t.Fatal("the restored memory is not charged to device 1")
	}
}

func TestRestoreRefusesBadImages(t *testing.T) {
	b := New(1, 1<<20)
	for name, img := range map[string]*backend.ContextImage{
		"overlap":        {NextHandle: 1, Regions: []backend.Region{{Addr: addressBase, Bytes: 1024}, {Addr: addressBase + 512, Bytes: 8}}},
		"two devices":    {NextHandle: 1, Regions: []backend.Region{{Addr: addressBase, Bytes: 8}, {Addr: addressBase + deviceStride, Bytes: 8}}},
		"below the base": {NextHandle: 1, Regions: []backend.Region{{Addr: addressBase - 1024, Bytes: 8}}},
		"too big":        {NextHandle: 1, Regions: []backend.Region{{Addr: addressBase, Bytes: 2 << 20}}},
		"stale handle":   {NextHandle: 1, Streams: []backend.StreamImage{{Handle: 5}}},
		"no such kernel": {NextHandle: 9, Modules: []backend.ModuleImage{{Handle: 1, Image: []byte("GPUSIM-MODULE 1\n")}}, Functions: []backend.FunctionImage{{Handle: 2, Module: 1, Name: "spin"}}},
	} {
		if _, err := b.RestoreContext(0, img); err == nil {
			t.Errorf("%s: restored", name)
		}
		if free := b.free(0); free != 1<<20 {
			t.Errorf("%s: a refused restore left %d bytes held", name, 1<<20-free)
		}
	}
}

// A driverglobal stands for one NVIDIA's driver places: it is none of the image's regions, a
// restore places it at a new address, and what it held comes back only as the image's contents.
func TestRestorePlacesDriverGlobalsAnewWithTheirContents(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	mod, _ := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel count_global\ndriverglobal counter 4\n"))
	at, _, _ := c.ModuleGetGlobal(mod, "counter") // only the test looks: the context stays movable
	c.(*Context).modules[mod].held = nil
	c.MemcpyHtoD(at, []byte{41, 0, 0, 0}, 0, false)
	img, err := c.(backend.Checkpointer).Image()
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Regions) != 0 || string(img.Modules[0].Contents["counter"]) != "\x29\x00\x00\x00" {
		t.Fatalf("regions %+v, contents %q: want no region and the counter's 4 bytes", img.Regions, img.Modules[0].Contents)
	}
	r, err := New(1, 1<<20).RestoreContext(0, img)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, n, err := r.ModuleGetGlobal(mod, "counter")
	if err != nil || n != 4 || p == at {
		t.Fatalf("restored counter at %#x (%d bytes), %v: want 4 bytes somewhere other than %#x", p, n, err, at)
	}
	got := make([]byte, 4)
	r.MemcpyDtoH(got, p, 0, false)
	if binary.LittleEndian.Uint32(got) != 41 {
		t.Fatalf("restored counter %v, want 41", got)
	}
	img.Modules[0].Contents["counter"] = []byte{1}
	if _, err := New(1, 1<<20).RestoreContext(0, img); err == nil {
		t.Fatal("contents of the wrong size were written")
	}
}

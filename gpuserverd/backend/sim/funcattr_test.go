package sim

import (
	"encoding/binary"
	"errors"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// TestDynamicSharedMemoryLimit: past 48 KiB a launch is refused until the function's limit is
// raised, the limit is per function and per context, and only settable attributes are.
func TestDynamicSharedMemoryLimit(t *testing.T) {
	b, c := newCtx(t, 1<<20)
	image := []byte("GPUSIM-MODULE 1\nkernel fill_u32\nkernel vector_add_f32\n\x00")
	mod, err := c.ModuleLoadData(image)
	if err != nil {
		t.Fatal(err)
	}
	fill, _ := c.ModuleGetFunction(mod, "fill_u32")
	other, _ := c.ModuleGetFunction(mod, "vector_add_f32")
	p, _ := c.MemAlloc(64)
	params := make([]byte, 16)
	binary.LittleEndian.PutUint64(params, p)
	binary.LittleEndian.PutUint32(params[8:], 7)
	binary.LittleEndian.PutUint32(params[12:], 16)
	launch := func(f backend.Handle, shared uint32) error {
		return c.LaunchKernel(backend.LaunchConfig{Function: f, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{16, 1, 1},
			SharedMemBytes: shared, Params: params})
	}
	if err := launch(fill, 48<<10); err != nil {
		t.Fatalf("48 KiB: %v", err)
	}
	if err := launch(fill, 64<<10); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("64 KiB before raising the limit: %v", err)
	}
	if err := c.FuncSetAttribute(fill, attrMaxDynamicShared, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := launch(fill, 64<<10); err != nil {
		t.Fatalf("64 KiB after raising the limit: %v", err)
	}
	if v, _ := c.FuncGetAttribute(fill, attrMaxDynamicShared); v != 64<<10 {
		t.Fatalf("limit reads %d", v)
	}
	if v, _ := c.FuncGetAttribute(other, attrMaxDynamicShared); v != defaultDynamicShared {
		t.Fatalf("another function's limit reads %d", v)
	}
	c2, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mod2, _ := c2.ModuleLoadData(image)
	fill2, _ := c2.ModuleGetFunction(mod2, "fill_u32")
	if v, _ := c2.FuncGetAttribute(fill2, attrMaxDynamicShared); v != defaultDynamicShared {
		t.Fatalf("another context's limit reads %d", v)
	}

	for _, bad := range []struct{ attr, value int32 }{
		{attrMaxDynamicShared, optinDynamicShared + 1}, {attrMaxDynamicShared, -1},
		{attrCarveout, 101}, {attrCarveout, -2}, {0, 1}, {4, 1},
	} {
		if err := c.FuncSetAttribute(fill, bad.attr, bad.value); !errors.Is(err, backend.ErrInvalidValue) {
			t.Errorf("set attribute %d to %d: %v", bad.attr, bad.value, err)
		}
	}
	if v, _ := c.FuncGetAttribute(fill, attrMaxDynamicShared); v != 64<<10 {
		t.Fatalf("a refused setting changed the limit to %d", v)
	}
	if err := c.FuncSetAttribute(backend.Handle(999), attrMaxDynamicShared, 1); !errors.Is(err, backend.ErrInvalidHandle) {
		t.Fatalf("unknown function: %v", err)
	}
}

func TestOccupancy(t *testing.T) {
	_, c := newCtx(t, 1<<20)
	mod, _ := c.ModuleLoadData([]byte("GPUSIM-MODULE 1\nkernel fill_u32\n\x00"))
	fill, _ := c.ModuleGetFunction(mod, "fill_u32")
	for _, tc := range []struct {
		block  int32
		shared uint64
		want   int32
	}{
		{256, 0, 8},        // 64 warps per SM, 8 per block
		{32, 0, 32},        // the 32-block limit
		{1024, 0, 2},       // threads
		{100, 0, 16},       // rounded up to 4 warps
		{256, 48 << 10, 4}, // shared memory: 228 KiB / 49 KiB
		{256, 64 << 10, 0}, // past the function's limit: cannot launch at all
		{2048, 0, 0},       // too many threads per block
	} {
		got, err := c.OccupancyMaxActiveBlocks(fill, tc.block, tc.shared, 0)
		if err != nil || got != tc.want {
			t.Errorf("block %d shared %d: %d, %v; want %d", tc.block, tc.shared, got, err, tc.want)
		}
	}
	if _, err := c.OccupancyMaxActiveBlocks(fill, 0, 0, 0); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("block size 0: %v", err)
	}
	if _, err := c.OccupancyMaxActiveBlocks(fill, 256, 0, 4); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("unknown flags: %v", err)
	}
	if _, err := c.OccupancyMaxActiveBlocks(backend.Handle(999), 256, 0, 0); !errors.Is(err, backend.ErrInvalidHandle) {
		t.Errorf("unknown function: %v", err)
	}
}

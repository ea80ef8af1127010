package worker

import (
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A captured stream-ordered allocation is an allocation node: charged when its graph is
// instantiated, not at capture; a destroyed executable graph stays charged until a trim, and its
// unfreed allocation until freed and trimmed.
func TestGraphMemoryCharges(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 10 << 20, Devices: []int{0}})
	var h wire.HandleReply
	var st wire.Status
	alloc := func(bytes uint64, want backend.Result) {
		t.Helper()
		c.call(&wire.MemAlloc{Bytes: bytes}, &h)
		if backend.Result(h.Result) != want {
			t.Fatalf("alloc of %d MiB: %d, want %d", bytes>>20, h.Result, want)
		}
		if want == 0 {
			c.call(&wire.MemFree{Ptr: h.Handle}, &st)
		}
	}
	c.call(&wire.StreamCreate{}, &h)
	s := h.Handle
	c.call(&wire.StreamBeginCapture{Stream: s}, &st)
	c.call(&wire.MemAllocAsync{Bytes: 8 << 20, Stream: s}, &h)
	ptr := h.Handle
	if h.Result != 0 {
		t.Fatalf("captured allocation: %d", h.Result)
	}
	c.call(&wire.StreamEndCapture{Stream: s}, &h)
	g := h.Handle
	alloc(8<<20, 0) // the capture charged nothing
	c.call(&wire.GraphInstantiate{Graph: g}, &h)
	x := h.Handle
	if h.Result != 0 {
		t.Fatalf("instantiate: %d", h.Result)
	}
	alloc(4<<20, backend.ErrOutOfMemory) // the graph may hold 8
	c.call(&wire.GraphInstantiate{Graph: g}, &h)
	if backend.Result(h.Result) != backend.ErrOutOfMemory {
		t.Fatalf("second instantiation past the quota: %d", h.Result)
	}
	c.send(&wire.GraphLaunch{Exec: x, Stream: s}, wire.FlagNoReply)
	c.call(&wire.Synchronize{}, &st)
	c.call(&wire.GraphExecDestroy{Exec: x}, &st)
	alloc(4<<20, backend.ErrOutOfMemory) // destroyed, not yet trimmed
	var trimmed wire.Status
	c.call(&wire.DeviceGraphMemTrim{}, &trimmed)
	if trimmed.Result != 0 {
		t.Fatalf("trim: %d %s", trimmed.Result, trimmed.Message)
	}
	alloc(4<<20, backend.ErrOutOfMemory) // its allocation is still out
	c.call(&wire.MemFreeAsync{Ptr: ptr}, &st)
	c.call(&wire.Synchronize{}, &st)
	alloc(4<<20, backend.ErrOutOfMemory) // in the graphs' pool until a trim
	c.call(&wire.DeviceGraphMemTrim{}, &st)
	alloc(10<<20, 0)
	var sz wire.SizeReply
	c.call(&wire.DeviceGraphMemAttribute{Attribute: backend.GraphMemReservedHigh}, &sz)
	if sz.Value != 8<<20 {
		t.Fatalf("reserved high %d", sz.Value)
	}
	c.call(&wire.DeviceGraphMemAttribute{Ordinal: 1, Attribute: backend.GraphMemUsed}, &sz)
	if backend.Result(sz.Result) != backend.ErrInvalidDevice {
		t.Fatalf("another device's graph memory: %d", sz.Result)
	}
}

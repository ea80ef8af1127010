package worker

import (
	"encoding/binary"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// Each guest thread's per-thread default stream is a stream of its own, made on first use: work
// on one thread's is not the other's, nor the legacy stream's; it cannot be destroyed.
func TestPerThreadStreams(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	var h wire.HandleReply
	c.call(&wire.ModuleLoad{Image: []byte("GPUSIM-MODULE 1\nkernel spin\n")}, &h)
	c.call(&wire.ModuleGetFunction{Module: h.Handle, Name: "spin"}, &h)
	spin := h.Handle
	if spin == 0 {
		t.Fatalf("spin: %+v", h)
	}
	threadA, threadB := wire.PerThreadStream|1, wire.PerThreadStream|2
	ns := make([]byte, 8)
	binary.LittleEndian.PutUint64(ns, 3e9) // busy long enough to be seen
	c.send(&wire.LaunchKernel{Function: spin, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1,
		Stream: threadA, Params: ns}, wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.StreamQuery{Stream: threadA}, &st)
	if backend.Result(st.Result) != backend.ErrNotReady {
		t.Fatalf("thread A's stream while its kernel runs: %+v", st)
	}
	c.call(&wire.StreamQuery{Stream: threadB}, &st)
	if st.Result != 0 {
		t.Fatalf("thread B's stream has nothing to do, but: %+v", st)
	}
	c.call(&wire.StreamDestroy{Stream: threadA}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidHandle {
		t.Fatalf("destroying a per-thread default stream: %+v", st)
	}
	c.call(&wire.StreamQuery{Stream: threadA}, &st)
	if backend.Result(st.Result) != backend.ErrNotReady {
		t.Fatalf("thread A's stream after the refused destroy: %+v", st)
	}
}

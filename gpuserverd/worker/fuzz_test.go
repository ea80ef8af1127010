package worker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// FuzzSession feeds arbitrary bytes to a session after its handshake: whatever a tenant sends,
// the worker must answer or refuse it, never panic (a panic in a stream goroutine would end the
// fuzzing process). Seeds are valid calls, so mutations reach deep into the dispatcher.
func FuzzSession(f *testing.F) {
	image := []byte("GPUSIM-MODULE 1\nkernel vector_add_f32\nkernel matmul_f32\nglobal g 8\n")
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	f.Add(seed(&wire.MemAlloc{Bytes: 64}, &wire.MemcpyHtoD{Dst: 0x7f2c00000000, Data: []byte{1, 2, 3}},
		&wire.MemcpyDtoH{Src: 0x7f2c00000000, Bytes: 3}))
	f.Add(seed(&wire.ModuleLoad{Image: image}, &wire.ModuleGetFunction{Module: 1, Name: "matmul_f32"},
		&wire.MemAlloc{Bytes: 4096}, &wire.LaunchKernel{Function: 7, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1,
			BlockY: 1, BlockZ: 1, Params: make([]byte, 36)}, &wire.Synchronize{}))
	f.Add(seed(&wire.StreamCreate{}, &wire.EventCreate{}, &wire.EventRecord{Event: 6, Stream: 5},
		&wire.StreamWaitEvent{Stream: 5, Event: 6}, &wire.EventElapsedTime{Start: 6, End: 6},
		&wire.Memset{Dst: 0x7f2c00000000, ElemSize: 4, Count: 1 << 62}))
	f.Add(seed(&wire.LanesOpen{Lanes: 2}, &wire.MemcpyHtoDStriped{Dst: 0x7f2c00000000, Bytes: 5, Lanes: 2},
		&wire.MemcpyDtoHStriped{Src: 0x7f2c00000000, Bytes: 5, Lanes: 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "shared", MemoryQuota: 1 << 20, Devices: []int{0}}, sim.New(1, 1<<24), true, in)
	})
}

// serveBytes feeds in to a new session after its handshake, then leaves: the session must end.
func serveBytes(t *testing.T, cfg Config, b *sim.Backend, lanes bool, in []byte) {
	a, c := net.Pipe()
	s := NewSession(cfg, b, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if lanes {
		s.EnableLanes()
	}
	done := make(chan struct{})
	go func() { s.Serve(context.Background()); close(done) }()
	go io.Copy(io.Discard, a) // replies
	a.SetWriteDeadline(time.Now().Add(2 * time.Second))
	a.Write(in)
	a.Close()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("session did not end after its client left")
	}
}

// FuzzLaneHello: any first frame on a lane is refused or attached, never a crash, and a refused
// one leaves the lanes as they were.
func FuzzLaneHello(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 32)
	f.Add((&wire.LaneHello{Version: wire.Version, SessionID: "s1", Key: key, Lane: 1}).Append(nil))
	f.Add((&wire.LaneHello{Version: wire.Version, SessionID: "s1", Key: key[:31], Lane: 9}).Append(nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := NewSession(Config{SessionID: "s1"}, sim.New(1, 1<<24), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		s.EnableLanes()
		s.lanes.open(2)
		copy(s.lanes.key, key)
		g, w := net.Pipe()
		go io.Copy(io.Discard, g)
		err := s.Attach(w, in)
		attached := 0
		for _, l := range s.lanes.conns {
			if l != nil {
				attached++
			}
		}
		var h wire.LaneHello
		valid := h.Decode(in) == nil && h.Version == wire.Version && h.SessionID == "s1" && bytes.Equal(h.Key, key) && h.Lane < 2
		if valid != (err == nil) || attached != map[bool]int{true: 1, false: 0}[valid] {
			t.Fatalf("valid %v, err %v, %d attached", valid, err, attached)
		}
		s.lanes.closeAll()
		g.Close()
	})
}

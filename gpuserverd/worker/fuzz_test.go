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
	// The hand-written families (families.go).
	f.Add(seed(&wire.MemAddressReserve{Size: 4 << 20}, &wire.MemCreate{Size: 2 << 20, AllocType: 1, LocationType: 1},
		&wire.MemMap{Ptr: 0x7f2c00000000, Size: 2 << 20, Handle: 2}, &wire.MemSetAccess{Ptr: 0x7f2c00000000,
			Size: 2 << 20, LocationType: 1, Flags: 3}, &wire.MemRetainAllocationHandle{Ptr: 0x7f2c00000000},
		&wire.MemUnmap{Ptr: 0x7f2c00000000, Size: 2 << 20}, &wire.MemRelease{Handle: 2}))
	f.Add(seed(&wire.MemAllocAsync{Bytes: 4096}, &wire.MemPoolCreate{AllocType: 1, LocationType: 1},
		&wire.MemPoolSetAttribute{Pool: 3, Attribute: 4, Value: 1 << 20}, &wire.MemFreeAsync{Ptr: 0x7f2c00000000},
		&wire.MemPoolTrimTo{Pool: 3}, &wire.DeviceGetMemPool{Which: 1}))
	f.Add(seed(&wire.ArrayCreate{Width: 8, Height: 4, Depth: 2, Format: 0x20, Channels: 1},
		&wire.Memcpy3DHtoX{DstKind: 3, Dst: 1, Width: 32, Height: 4, Depth: 2, Data: make([]byte, 256)},
		&wire.Memcpy3DXtoH{SrcKind: 3, Src: 1, SrcX: 4, Width: 8, Height: 2, Depth: 1},
		&wire.Memcpy3DXtoX{SrcKind: 3, Src: 1, DstKind: 2, Dst: 0x7f2c00000000, DstPitch: 32, Width: 32, Height: 1, Depth: 1},
		&wire.TexObjectCreate{ResType: 0, Handle: 1, TexDesc: make([]byte, 104)}, &wire.TexObjectGetResourceDesc{Object: 1}))
	f.Add(seed(&wire.StreamCreate{}, &wire.StreamBeginCapture{Stream: 1}, &wire.Memset{Dst: 0x7f2c00000000, ElemSize: 1,
		Count: 8, Stream: 1, Async: 1}, &wire.StreamEndCapture{Stream: 1}, &wire.GraphInstantiate{Graph: 3},
		&wire.GraphLaunch{Exec: 4}, &wire.GraphCreate{}, &wire.GraphAddEmptyNode{Graph: 5, Deps: make([]byte, 8)},
		&wire.GraphGetNodes{Graph: 5}, &wire.GraphExecUpdate{Exec: 4, Graph: 5}))
	f.Add(seed(&wire.TensorMapEncode{DataType: 7, Rank: 2, GlobalDim: make([]byte, 16), GlobalStrides: make([]byte, 8),
		BoxDim: []uint32{4, 4}, ElementStrides: []uint32{1, 1}}, &wire.LinkCreate{},
		&wire.LinkAddData{Link: 1, Data: image}, &wire.LinkComplete{Link: 1}, &wire.LinkDestroy{Link: 1},
		&wire.StreamMemOp{Op: 2, Addr: 0x7f2c00000000, Value: 1}))
	// cuRAND's tables, managed module variables, a stream's access-policy window (s6-samples).
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.RandTable{Table: 101}, &wire.RandTable{Table: 2, Dst: 0x7f2c00000000, Bytes: 4096},
		&wire.ModuleLoad{Image: []byte("GPUSIM-MODULE 1\nglobal m 8 managed 9\n")}, &wire.ModuleGetGlobalManaged{Module: 2, Name: "m"},
		&wire.StreamCreate{}, &wire.StreamSetAccessPolicy{Stream: 3, Base: 0x7f2c00000000, Bytes: 4096, HitRatio: 0.5, HitProp: 2}))
	// Conditional and memory nodes, capture into a graph (graphextras.go).
	f.Add(seed(&wire.GraphCreate{}, &wire.GraphConditionalHandleCreate{Graph: 1, DefaultValue: 1, Flags: 1},
		&wire.GraphAddConditionalNode{Graph: 1, Handle: 0xc0d0<<48 | 2, CondType: 1, Size: 1},
		&wire.GraphAddMemAllocNode{Graph: 1, Bytes: 4096, AllocType: 1, LocationType: 1},
		&wire.GraphAddMemFreeNode{Graph: 1, Deps: []byte{5, 0, 0, 0, 0, 0, 0, 0}, Ptr: 0x7f2c00000000},
		&wire.GraphInstantiate{Graph: 1}, &wire.GraphLaunch{Exec: 7}, &wire.DeviceGraphMemAttribute{Attribute: 2},
		&wire.DeviceGraphMemTrim{}, &wire.DeviceSetGraphMemAttribute{Attribute: 1}))
	f.Add(seed(&wire.StreamCreate{}, &wire.GraphCreate{}, &wire.StreamBeginCaptureToGraph{Stream: 1, Graph: 2},
		&wire.MemAllocAsync{Bytes: 64, Stream: 1}, &wire.StreamCaptureGraph{Stream: 1},
		&wire.StreamUpdateCaptureDependencies{Stream: 1, Deps: []byte{3, 0, 0, 0, 0, 0, 0, 0}, Flags: 1},
		&wire.StreamEndCapture{Stream: 1}))
	// Host nodes, stages, clones and an executable graph's nodes (graphstage.go, graphedits.go).
	f.Add(seed(&wire.GraphCreate{}, &wire.GraphAddEmptyNode{Graph: 1}, &wire.GraphAddHostNode{Graph: 1,
		Deps: []byte{2, 0, 0, 0, 0, 0, 0, 0}, Fn: 0x401000, Data: 8}, &wire.GraphAddEmptyNode{Graph: 1,
		Deps: []byte{3, 0, 0, 0, 0, 0, 0, 0}}, &wire.GraphClone{Graph: 1}, &wire.GraphInstantiate{Graph: 1},
		&wire.GraphExecPlan{Exec: 9}, &wire.GraphLaunchStage{Exec: 9, Stage: 1}, &wire.GraphExecHostNodeSetParams{
			Exec: 9, Node: 3, Fn: 0x402000}, &wire.GraphExecMemsetNodeSetParams{Exec: 9, Node: 2, ElemSize: 4, Width: 1,
			Height: 1}, &wire.GraphExecUpdate{Exec: 9, Graph: 5}, &wire.GraphNodeFindInClone{Node: 2, Clone: 5},
		&wire.StreamCreate{}, &wire.StreamBeginCapture{Stream: 14}, &wire.CaptureHostFunc{Stream: 14, Fn: 1},
		&wire.StreamEndCapture{Stream: 14}, &wire.GraphExecDestroy{Exec: 9}))
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
	feedSession(t, s, a, in)
}

// feedSession serves s, writes in as its client (a, the other end of s's connection), leaves,
// and waits for the session to end.
func feedSession(t *testing.T, s *Session, a net.Conn, in []byte) {
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

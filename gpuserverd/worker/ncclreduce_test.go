package worker

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"net"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestReduceOps(t *testing.T) {
	in := [][]byte{f32s(1, -2, 3), f32s(4, 5, -6), f32s(7, 8, 9)}
	for op, want := range map[uint32][]float32{opSum: {12, 11, 6}, opProd: {28, -80, -162}, opMax: {7, 8, 9},
		opMin: {1, -2, -6}, opAvg: {4, 11.0 / 3, 2}} {
		if got := reduce(in, ncclFloat32, op); string(got) != string(f32s(want...)) {
			t.Errorf("op %d: got %v want %v", op, got, f32s(want...))
		}
	}
	i8 := reduce([][]byte{{100, 0x80}, {100, 1}}, ncclInt8, opSum) // wraps as int8
	if int8(i8[0]) != -56 || int8(i8[1]) != -127 {
		t.Errorf("int8 sum %v", i8)
	}
	if m := reduce([][]byte{{0xff}, {1}}, ncclInt8, opMax); m[0] != 1 { // -1 < 1 signed
		t.Errorf("int8 max %v", m)
	}
	if m := reduce([][]byte{{0xff}, {1}}, ncclUint8, opMax); m[0] != 0xff {
		t.Errorf("uint8 max %v", m)
	}
}

func TestHalfAndBF16RoundTrip(t *testing.T) {
	for _, v := range []float32{0, 1, -2.5, 65504, 0.000061035156, 5.9604645e-08, 1024.5} {
		if got := halfToFloat(floatToHalf(v)); got != v && !(v == 1024.5 && got == 1024) {
			t.Errorf("half %v -> %v", v, got)
		}
	}
	if floatToHalf(1e6) != 0x7c00 {
		t.Errorf("overflow to inf")
	}
	h := make([]byte, 2)
	putFloat(h, 3, ncclBfloat16)
	if getFloat(h, ncclBfloat16) != 3 {
		t.Errorf("bf16 3 -> %v", getFloat(h, ncclBfloat16))
	}
	one, two := make([]byte, 2), make([]byte, 2)
	putFloat(one, 1.5, ncclFloat16)
	putFloat(two, 2.25, ncclFloat16)
	if s := getFloat(reduce([][]byte{one, two}, ncclFloat16, opSum), ncclFloat16); s != 3.75 {
		t.Errorf("half sum %v", s)
	}
}

// recordingNCCL is a test double of a backend's NCCL over the simulated backend: it records the
// cliques made and the collectives handed to it, and runs none.
type recordingNCCL struct {
	*sim.Backend
	inits [][]backend.Context
	runs  []backend.Collective
	fail  bool
}

func (r *recordingNCCL) CommInitAll(ctxs []backend.Context) (backend.Clique, error) {
	if r.fail {
		return nil, backend.ErrNotSupported
	}
	r.inits = append(r.inits, ctxs)
	return r, nil
}
func (r *recordingNCCL) Run(c backend.Collective) error { r.runs = append(r.runs, c); return nil }
func (r *recordingNCCL) Close() error                   { return nil }

// A backend with NCCL gets the clique once every rank joined and each collective whole (every
// rank's part, in rank order); without it (or when it fails) the worker stages the collective.
func TestCollectivesGoToBackendNCCL(t *testing.T) {
	for _, fail := range []bool{false, true} {
		rec := &recordingNCCL{Backend: sim.New(2, 1<<30), fail: fail}
		a, b := net.Pipe()
		s := NewSession(Config{Tier: "dedicated", Devices: []int{1, 0}}, rec, b, slog.Default())
		c := &client{t: t, conn: a, done: make(chan error, 1)}
		go func() { c.done <- s.Serve(context.Background()) }()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		var hello wire.HelloReply
		c.read(&hello)
		var r wire.NcclReply
		c.call(&wire.NcclGetUniqueId{}, &r)
		id0, id1 := r.Id0, r.Id1
		comms := make([]uint64, 2)
		bufs := make([]uint64, 2)
		for rank := range 2 {
			var st wire.Status
			c.call(&wire.SetDevice{Ordinal: uint32(rank)}, &st)
			var h wire.HandleReply
			c.call(&wire.MemAlloc{Bytes: 16}, &h)
			bufs[rank] = h.Handle
			c.call(&wire.MemcpyHtoD{Dst: h.Handle, Data: f32s(1, 2, 3, float32(rank))}, &st)
			c.call(&wire.NcclCommInit{Id0: id0, Id1: id1, Nranks: 2, Rank: uint32(rank), Device: uint32(rank)}, &r)
			if r.Status != 0 {
				t.Fatalf("init rank %d: %+v", rank, r)
			}
			comms[rank] = r.Comm
		}
		for rank := range 2 {
			c.call(&wire.NcclCollective{Comm: comms[rank], Kind: collAllReduce, Send: bufs[rank], Recv: bufs[rank],
				Count: 4, Datatype: ncclFloat32, Op: opSum}, &r)
			if r.Status != 0 {
				t.Fatalf("all-reduce rank %d: %+v", rank, r)
			}
		}
		if fail {
			if len(rec.runs) != 0 {
				t.Fatalf("failed NCCL still ran %v", rec.runs)
			}
			var d wire.MemcpyDtoHData
			c.call(&wire.MemcpyDtoH{Src: bufs[1], Bytes: 16}, &d)
			if string(d.Data) != string(f32s(2, 4, 6, 1)) {
				t.Fatalf("staged all-reduce: %v", d.Data)
			}
		} else if len(rec.inits) != 1 || len(rec.inits[0]) != 2 || len(rec.runs) != 1 ||
			rec.runs[0].Parts[1].Send != bufs[1] || rec.runs[0].Count != 4 || rec.runs[0].Datatype != ncclFloat32 {
			t.Fatalf("inits %d, runs %+v", len(rec.inits), rec.runs)
		}
		a.Close()
	}
}

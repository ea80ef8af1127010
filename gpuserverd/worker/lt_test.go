package worker

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// ltList is an attribute list on the wire: id, value pairs (uint32 and uint64 values).
func ltList(kvs ...any) []byte {
	var o backend.LtObject
	for i := 0; i < len(kvs); i += 2 {
		var v []byte
		switch x := kvs[i+1].(type) {
		case uint32:
			v = binary.LittleEndian.AppendUint32(nil, x)
		case uint64:
			v = binary.LittleEndian.AppendUint64(nil, x)
		}
		o.Attrs = append(o.Attrs, backend.LtAttr{ID: kvs[i].(uint32), Value: v})
	}
	return o.Encode()
}

func ltLayout(rows, cols uint64) []byte {
	return ltList(backend.LtLayoutType, backend.DataR32F, backend.LtLayoutRows, rows, backend.LtLayoutCols, cols, backend.LtLayoutLd, rows)
}

// A 2x2 float matmul with a bias epilogue through the wire, on a cuBLASLt handle and on a cuBLAS
// one: the heuristic's algo goes back verbatim, the result is read back by a copy.
func TestLtMatmulThroughTheWire(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	lt := c.blas(&wire.LtCreate{})
	bl := c.blas(&wire.BlasCreate{})
	if lt.Status != 0 || bl.Status != 0 {
		t.Fatalf("create: %+v %+v", lt, bl)
	}
	a, b, d, bias := c.alloc(16), c.alloc(16), c.alloc(16), c.alloc(8)
	c.putF32(a, []float32{1, 2, 3, 4})
	c.putF32(b, []float32{5, 6, 7, 8})
	c.putF32(bias, []float32{100, 200})
	desc := ltList(backend.LtDescCompute, backend.Compute32F, backend.LtDescScale, backend.DataR32F,
		backend.LtDescEpilogue, backend.LtEpilogueBias, backend.LtDescBias, bias)
	for _, h := range []uint64{lt.Handle, bl.Handle} {
		var hr wire.LtHeuristicReply
		c.call(&wire.LtHeuristic{Handle: h, Desc: desc, A: ltLayout(2, 2), B: ltLayout(2, 2), C: ltLayout(2, 2),
			D: ltLayout(2, 2), Pref: ltList(), Requested: 8}, &hr)
		if hr.Status != 0 || hr.Count != 1 || hr.State0 != 0 {
			t.Fatalf("heuristic: %+v", hr)
		}
		algo := make([]byte, 64)
		binary.LittleEndian.PutUint64(algo, hr.Algo0W0)
		c.send(&wire.LtMatmul{Handle: h, Desc: desc, Alpha: binary.LittleEndian.AppendUint32(nil, math.Float32bits(1)),
			Beta: binary.LittleEndian.AppendUint32(nil, 0), A: a, Adesc: ltLayout(2, 2), B: b, Bdesc: ltLayout(2, 2),
			C: d, Cdesc: ltLayout(2, 2), D: d, Ddesc: ltLayout(2, 2), Algo: algo}, wire.FlagNoReply)
		var st wire.Status
		c.call(&wire.Synchronize{}, &st)
		if st.Result != 0 {
			t.Fatalf("sync: %+v", st)
		}
		// A*B = [[23 31] [34 46]] plus the bias by row, column-major.
		if got, want := c.getF32(d, 4), []float32{123, 234, 131, 246}; !equalF32(got, want) {
			t.Fatalf("D = %v, want %v", got, want)
		}
	}
	// A cuBLAS call refuses a cuBLASLt handle (NVIDIA's would misread it); BlasDestroy takes both.
	if r := c.blas(&wire.BlasSetStream{Handle: lt.Handle}); backend.BlasStatus(r.Status) != backend.BlasNotInitialized {
		t.Fatalf("cuBLAS call on a cuBLASLt handle: %+v", r)
	}
	for _, h := range []uint64{lt.Handle, bl.Handle} {
		if r := c.blas(&wire.BlasDestroy{Handle: h}); r.Status != 0 {
			t.Fatalf("destroy %d: %+v", h, r)
		}
	}
}

// Refusals name the object and field at fault; a matmul's refusal surfaces at the next
// synchronising call.
func TestLtRefusals(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.blas(&wire.LtCreate{}).Handle
	a := c.alloc(64)
	desc := ltList(backend.LtDescCompute, backend.Compute32F, backend.LtDescScale, backend.DataR32F)
	for _, tc := range []struct {
		m   *wire.LtHeuristic
		msg string
	}{
		{&wire.LtHeuristic{Handle: h, Desc: []byte{1}, A: ltLayout(2, 2), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(), Requested: 1}, "desc:"},
		{&wire.LtHeuristic{Handle: h, Desc: desc, A: ltList(backend.LtLayoutType, uint32(0)), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(), Requested: 1}, "a: cublas: cuBLASLt matrix layout: CUBLAS_STATUS_INVALID_VALUE (7): attribute 2 (a create argument) missing"},
		{&wire.LtHeuristic{Handle: h, Desc: desc, A: ltLayout(2, 2), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(uint32(77), uint32(1)), Requested: 1}, "pref: cublas: cuBLASLt matmul preference: CUBLAS_STATUS_INVALID_VALUE (7): attribute 77"},
		{&wire.LtHeuristic{Handle: h, Desc: desc, A: ltLayout(2, 3), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(), Requested: 1}, "shapes"},
		{&wire.LtHeuristic{Handle: h, Desc: desc, A: ltLayout(2, 2), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(), Requested: 0}, "requested 0"},
		{&wire.LtHeuristic{Handle: h + 50, Desc: desc, A: ltLayout(2, 2), B: ltLayout(2, 2), C: ltLayout(2, 2), D: ltLayout(2, 2), Pref: ltList(), Requested: 1}, "no cuBLASLt handle"},
	} {
		var r wire.LtHeuristicReply
		c.call(tc.m, &r)
		if r.Status == 0 || !strings.Contains(r.Message, tc.msg) {
			t.Errorf("%q: %+v", tc.msg, r)
		}
	}
	one := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))
	for _, tc := range []struct {
		m   *wire.LtMatmul
		msg string
	}{
		{&wire.LtMatmul{Handle: h, Desc: desc, Alpha: one, Beta: one, A: a, Adesc: ltLayout(2, 2), B: a, Bdesc: ltLayout(2, 2), C: a, Cdesc: ltLayout(2, 2), D: a, Ddesc: ltLayout(2, 2), Workspace: a + 32, WorkspaceSize: 64}, "workspace"},
		{&wire.LtMatmul{Handle: h, Desc: desc, Alpha: one, Beta: one, A: a, Adesc: ltLayout(2, 2), B: a, Bdesc: ltLayout(2, 2), C: a, Cdesc: ltLayout(2, 2), D: a, Ddesc: ltLayout(2, 2), Algo: []byte{1, 2, 3}}, "algo of 3 bytes"},
		{&wire.LtMatmul{Handle: h, Desc: desc, Alpha: binary.LittleEndian.AppendUint64(nil, 1), Beta: one, A: a, Adesc: ltLayout(2, 2), B: a, Bdesc: ltLayout(2, 2), C: a, Cdesc: ltLayout(2, 2), D: a, Ddesc: ltLayout(2, 2)}, "alpha: 8 bytes, want 4"},
		{&wire.LtMatmul{Handle: h, Desc: desc, Alpha: one, Beta: one, A: a, Adesc: ltLayout(2, 2), B: a, Bdesc: ltLayout(2, 2), C: a, Cdesc: ltLayout(2, 2), D: a, Ddesc: []byte{}}, "ddesc:"},
	} {
		c.send(tc.m, wire.FlagNoReply)
		var st wire.Status
		c.call(&wire.Synchronize{}, &st)
		if st.Result == 0 || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("%q: sync after the matmul: %+v", tc.msg, st)
		}
	}
	var r wire.LtAttributeReply
	c.call(&wire.LtGetAttribute{Kind: uint32(backend.LtMatmulDesc), Object: desc, Attribute: backend.LtDescTransA, Size: 4}, &r)
	if r.Status != 0 || r.Value != 0 || r.Size != 4 {
		t.Fatalf("TRANSA's default: %+v", r)
	}
	c.call(&wire.LtGetAttribute{Kind: 9, Object: desc, Attribute: 0, Size: 4}, &r)
	if backend.BlasStatus(r.Status) != backend.BlasInvalidValue || !strings.Contains(r.Message, "kind 9") {
		t.Fatalf("kind 9: %+v", r)
	}
}

package worker

import (
	"encoding/binary"
	"math"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

func (c *client) putU64s(dst uint64, v ...uint64) {
	c.t.Helper()
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	var st wire.Status
	if c.call(&wire.MemcpyHtoD{Dst: dst, Data: b}, &st); st.Result != 0 {
		c.t.Fatalf("HtoD: %+v", st)
	}
}

func (c *client) synchronize() {
	c.t.Helper()
	var st wire.Status
	if c.call(&wire.Synchronize{}, &st); st.Result != 0 {
		c.t.Fatalf("synchronize: %+v", st)
	}
}

// A triangular solve sent without a reply overwrites B with X; the triangle not named is not read.
func TestBlasTrsmThroughTheWire(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.blas(&wire.BlasCreate{}).Handle
	a, b := c.alloc(16), c.alloc(8)
	c.putF32(a, []float32{2, 1, 99, 4}) // lower [[2 .] [1 4]]; 99 lies in the upper triangle
	c.putF32(b, []float32{2, 9})
	alpha := uint64(0x40000000) // 2.0f
	c.send(&wire.BlasTrsm{Handle: h, M: 2, N: 1, Alpha: alpha, A: a, Lda: 2, B: b, Ldb: 2}, wire.FlagNoReply)
	c.synchronize()
	// 2x = 4, x + 4y = 18
	if got := c.getF32(b, 2); !equalF32(got, []float32{2, 4}) {
		t.Fatalf("X = %v, want [2 4]", got)
	}
	// Right side, upper, transposed, unit diagonal: X op(A) = B with op(A) = [[1 0] [3 1]].
	c.putF32(a, []float32{-7, 99, 3, -7}) // upper [[. 3] [. .]], the diagonal taken as 1
	c.putF32(b, []float32{7, 1})          // a 1 x 2 row
	c.send(&wire.BlasTrsm{Handle: h, Side: 1, Uplo: 1, Trans: 1, Diag: 1, M: 1, N: 2, Alpha: 0x3f800000, A: a, Lda: 2, B: b, Ldb: 1}, wire.FlagNoReply)
	c.synchronize()
	// [x y] [[1 0] [3 1]] = [x+3y, y] = [7 1]
	if got := c.getF32(b, 2); !equalF32(got, []float32{4, 1}) {
		t.Fatalf("X = %v, want [4 1]", got)
	}
	for _, m := range []*wire.BlasTrsm{
		{Handle: h, M: 3, N: 1, A: a, Lda: 2, B: b, Ldb: 3},  // lda < m
		{Handle: h, M: -1, N: 1, A: a, Lda: 2, B: b, Ldb: 2}, // negative size
		{Handle: h, Side: 2, M: 1, N: 1, A: a, Lda: 1, B: b, Ldb: 1},
		{Handle: h, Dbl: 7, M: 1, N: 1, A: a, Lda: 1, B: b, Ldb: 1},
	} {
		if r := c.blas(m); backend.BlasStatus(r.Status) != backend.BlasInvalidValue {
			t.Errorf("%+v: %+v, want CUBLAS_STATUS_INVALID_VALUE", m, r)
		}
	}
	if r := c.blas(&wire.BlasTrsm{Handle: h + 50, M: 1, N: 1, A: a, Lda: 1, B: b, Ldb: 1}); backend.BlasStatus(r.Status) != backend.BlasNotInitialized {
		t.Errorf("trsm on a handle not the session's: %+v", r)
	}
}

// getrfBatched factors two matrices (one needing a row swap) in place; getrsBatched solves with
// the factors, answering with a reply.
func TestBlasBatchedLUThroughTheWire(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.blas(&wire.BlasCreate{}).Handle
	m := c.alloc(4096)
	a0, a1, b0, b1, aarr, barr, piv, info := m, m+16, m+32, m+40, m+64, m+80, m+96, m+112
	c.putF32(a0, []float32{0, 2, 1, 3}) // [[0 1] [2 3]]: a zero first pivot
	c.putF32(a1, []float32{4, 2, 1, 3}) // [[4 1] [2 3]]
	c.putF32(b0, []float32{1, 8})
	c.putF32(b1, []float32{6, 8})
	c.putU64s(aarr, a0, a1)
	c.putU64s(barr, b0, b1)
	c.putU64s(info, ^uint64(0)) // overwritten with zeros
	c.send(&wire.BlasGetrfBatched{Handle: h, N: 2, Aarray: aarr, Lda: 2, Pivots: piv, Info: info, Batch: 2}, wire.FlagNoReply)
	if r := c.blas(&wire.BlasGetrsBatched{Handle: h, N: 2, Nrhs: 1, Aarray: aarr, Lda: 2, Pivots: piv, Barray: barr, Ldb: 2, Batch: 2}); r.Status != 0 || r.Result != 0 {
		t.Fatalf("getrs: %+v", r)
	}
	c.synchronize()
	if got := c.getF32(b0, 4); !equalF32(got, []float32{2.5, 1, 1, 2}) {
		t.Fatalf("X = %v, want [2.5 1] and [1 2]", got)
	}
	if got := c.getF32(info, 2); got[0] != 0 || got[1] != 0 {
		t.Fatalf("info = %v, want zeros", got)
	}
	if got := c.getF32(piv, 4); math32(got[0]) != 2 || math32(got[2]) != 1 {
		t.Fatalf("pivots = %v, want row 2 first in A0 and no swap in A1", got)
	}
	for _, m := range []wire.Message{
		&wire.BlasGetrsBatched{Handle: h, N: 2, Nrhs: 1, Aarray: aarr, Lda: 2, Barray: barr, Ldb: 2, Batch: -1},
		&wire.BlasGetrsBatched{Handle: h, N: 2, Nrhs: 1, Aarray: aarr, Lda: 2, Barray: barr, Ldb: 1, Batch: 1},
		&wire.BlasGetrfBatched{Handle: h, N: 2, Aarray: aarr, Lda: 2, Info: info, Batch: 1 << 30},
		&wire.BlasGetrfBatched{Handle: h, N: 2, Lda: 2, Info: info, Batch: 1},
	} {
		if r := c.blas(m); backend.BlasStatus(r.Status) != backend.BlasInvalidValue {
			t.Errorf("%+v: %+v, want CUBLAS_STATUS_INVALID_VALUE", m, r)
		}
	}
}

// math32 reads an int32 that getF32 read as a float's bits.
func math32(f float32) int32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
	return int32(binary.LittleEndian.Uint32(b[:]))
}

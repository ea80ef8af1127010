package worker

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

func (c *client) blas(m wire.Message) wire.BlasReply {
	c.t.Helper()
	var r wire.BlasReply
	c.call(m, &r)
	return r
}

func (c *client) alloc(n uint64) uint64 {
	c.t.Helper()
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: n}, &h)
	if h.Result != 0 {
		c.t.Fatalf("alloc %d: %d", n, h.Result)
	}
	return h.Handle
}

func (c *client) putF32(dst uint64, v []float32) {
	c.t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	var st wire.Status
	c.call(&wire.MemcpyHtoD{Dst: dst, Data: b}, &st)
	if st.Result != 0 {
		c.t.Fatalf("HtoD: %+v", st)
	}
}

func (c *client) getF32(src uint64, n int) []float32 {
	c.t.Helper()
	var d wire.MemcpyDtoHData
	c.call(&wire.MemcpyDtoH{Src: src, Bytes: uint64(4 * n)}, &d)
	if d.Result != 0 {
		c.t.Fatalf("DtoH: %d", d.Result)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d.Data[4*i:]))
	}
	return out
}

// sgemm2 is a 2x2 SGEMM message over a, b, c (column-major, ld 2).
func sgemm2(h, a, b, c uint64, alpha, beta float32) *wire.BlasGemm {
	return &wire.BlasGemm{Handle: h, Compute: uint32(backend.Compute32F), M: 2, N: 2, K: 2, Alpha: uint64(math.Float32bits(alpha)),
		Beta: uint64(math.Float32bits(beta)), A: a, Lda: 2, B: b, Ldb: 2, C: c, Ldc: 2, Batch: 1}
}

// A GEMM sent without a reply runs on the handle's stream; its result is read back by a copy.
func TestBlasGemmThroughTheWire(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	r := c.blas(&wire.BlasCreate{})
	if r.Result != 0 || r.Handle == 0 {
		t.Fatalf("create: %+v", r)
	}
	var sh wire.HandleReply
	c.call(&wire.StreamCreate{Flags: 1}, &sh)
	if r := c.blas(&wire.BlasSetStream{Handle: r.Handle, Stream: sh.Handle}); r.Status != 0 {
		t.Fatalf("set stream: %+v", r)
	}
	a, b, cc := c.alloc(16), c.alloc(16), c.alloc(16)
	c.putF32(a, []float32{1, 2, 3, 4}) // [[1 3] [2 4]]
	c.putF32(b, []float32{5, 6, 7, 8}) // [[5 7] [6 8]]
	c.putF32(cc, []float32{1, 1, 1, 1})
	c.send(sgemm2(r.Handle, a, b, cc, 2, 10), wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.StreamSynchronize{Stream: sh.Handle}, &st)
	if st.Result != 0 {
		t.Fatalf("sync: %+v", st)
	}
	// A*B = [[23 31] [34 46]]; 2*AB + 10*1, column-major.
	want := []float32{56, 78, 72, 102}
	if got := c.getF32(cc, 4); !equalF32(got, want) {
		t.Fatalf("C = %v, want %v", got, want)
	}
	if r := c.blas(&wire.BlasDestroy{Handle: r.Handle}); r.Status != 0 {
		t.Fatalf("destroy: %+v", r)
	}
	if r := c.blas(sgemm2(r.Handle, a, b, cc, 1, 0)); backend.BlasStatus(r.Status) != backend.BlasNotInitialized {
		t.Fatalf("GEMM on a destroyed handle: %+v", r)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Refusals name what was wrong, carry cuBLAS's status and the CUDA code it stands for, and a
// refused GEMM sent without waiting surfaces at the next synchronising call.
func TestBlasRefusals(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.blas(&wire.BlasCreate{}).Handle
	a := c.alloc(64)
	for _, tc := range []struct {
		m      wire.Message
		status backend.BlasStatus
		result backend.Result
		msg    string
	}{
		{sgemm2(h+100, a, a, a, 1, 0), backend.BlasNotInitialized, backend.ErrInvalidHandle, "no cuBLAS handle"},
		{&wire.BlasGemm{Handle: h, Compute: 68, M: 4, N: 1, K: 1, A: a, Lda: 3, B: a, Ldb: 1, C: a, Ldc: 4, Batch: 1}, backend.BlasInvalidValue, backend.ErrInvalidValue, "lda 3 < 4 rows"},
		{&wire.BlasGemm{Handle: h, Compute: 68, M: -1, Lda: 1, Ldb: 1, Ldc: 1, Batch: 1}, backend.BlasInvalidValue, backend.ErrInvalidValue, "negative size"},
		{&wire.BlasGemm{Handle: h, Ex: 1, Atype: 7, Compute: 68, Lda: 1, Ldb: 1, Ldc: 1, Batch: 1}, backend.BlasInvalidValue, backend.ErrInvalidValue, "element type 7"},
		{&wire.BlasGemm{Handle: h, Ex: 1, Compute: 99, Lda: 1, Ldb: 1, Ldc: 1, Batch: 1}, backend.BlasInvalidValue, backend.ErrInvalidValue, "compute type 99"},
		{&wire.BlasGemm{Handle: h, Atype: 2, Btype: 2, Compute: 68, Lda: 1, Ldb: 1, Ldc: 1, Batch: 1}, backend.BlasInvalidValue, backend.ErrInvalidValue, "not SGEMM's or DGEMM's"},
		{&wire.BlasGemm{Handle: h, Ex: 1, Atype: 3, Btype: 3, Ctype: 10, Compute: 72, Lda: 1, Ldb: 1, Ldc: 1, Batch: 1}, backend.BlasNotSupported, backend.ErrNotSupported, "floating-point GEMMs only"},
		{&wire.BlasGemm{Handle: h, Compute: 68, Lda: 1, Ldb: 1, Ldc: 1, Batch: 0}, backend.BlasInvalidValue, backend.ErrInvalidValue, "batch count 0"},
		{&wire.BlasSetStream{Handle: h, Stream: 12345}, backend.BlasNotInitialized, backend.ErrInvalidHandle, "stream"},
		{&wire.BlasSetWorkspace{Handle: h, Ptr: a + 32, Bytes: 64}, backend.BlasInvalidValue, backend.ErrInvalidValue, "not inside one of the session's allocations"},
		{&wire.BlasDestroy{Handle: 999}, backend.BlasNotInitialized, backend.ErrInvalidHandle, "no cuBLAS handle 999"},
	} {
		r := c.blas(tc.m)
		if backend.BlasStatus(r.Status) != tc.status || backend.Result(r.Result) != tc.result || !strings.Contains(r.Message, tc.msg) {
			t.Errorf("%s: %+v, want status %d result %d message with %q", tc.m.Type(), r, tc.status, tc.result, tc.msg)
		}
	}
	if r := c.blas(&wire.BlasSetWorkspace{Handle: h, Ptr: a, Bytes: 64}); r.Status != 0 {
		t.Fatalf("workspace inside an allocation: %+v", r)
	}
	if r := c.blas(&wire.BlasSetWorkspace{Handle: h}); r.Status != 0 {
		t.Fatalf("workspace back to the worker's: %+v", r)
	}
	c.send(sgemm2(h+100, a, a, a, 1, 0), wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidHandle || !strings.Contains(st.Message, "asynchronous BlasGemm") {
		t.Fatalf("sync after a refused GEMM: %+v", st)
	}
	// An operand outside device memory fails when the stream runs it: sticky, as on a GPU.
	c.send(sgemm2(h, a, a, 0x10, 1, 0), wire.FlagNoReply)
	c.call(&wire.Synchronize{}, &st)
	if backend.Result(st.Result) != backend.ErrIllegalAddress {
		t.Fatalf("sync after a GEMM writing outside memory: %+v", st)
	}
}

// A handle's workspace is charged to the session's quota and cannot be freed by the program;
// destroying the handle gives it back.
func TestBlasWorkspaceIsCharged(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 40 << 20, Devices: []int{0}})
	first := c.alloc(512)
	h := c.blas(&wire.BlasCreate{}).Handle
	var mi wire.MemGetInfoReply
	c.call(&wire.MemGetInfo{}, &mi)
	if mi.Free != 40<<20-512-blasWorkspace {
		t.Fatalf("free %d after a handle, want %d", mi.Free, 40<<20-512-blasWorkspace)
	}
	if r := c.blas(&wire.BlasCreate{}); backend.BlasStatus(r.Status) != backend.BlasAllocFailed || !strings.Contains(r.Message, "quota") {
		t.Fatalf("second handle past the quota: %+v", r)
	}
	var st wire.Status
	ws := first + 512 // the simulated allocator places the workspace right after
	c.call(&wire.MemFree{Ptr: ws}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue || !strings.Contains(st.Message, "workspace") {
		t.Fatalf("freeing the workspace: %+v", st)
	}
	c.blas(&wire.BlasDestroy{Handle: h})
	c.call(&wire.MemGetInfo{}, &mi)
	if mi.Free != 40<<20-512 {
		t.Fatalf("free %d after destroy, want %d", mi.Free, 40<<20-512)
	}
}

// Handles are the session's own: another session's id is refused, and the owner's still works.
func TestBlasHandlesAreSessionLocal(t *testing.T) {
	owner := newSession(t, Config{Tier: "shared", TenantID: "a", Devices: []int{0}})
	other := newSession(t, Config{Tier: "shared", TenantID: "b", Devices: []int{0}})
	h := owner.blas(&wire.BlasCreate{}).Handle
	p := other.alloc(16)
	for _, m := range []wire.Message{sgemm2(h, p, p, p, 1, 0), &wire.BlasSetMathMode{Handle: h, Mode: 1}, &wire.BlasDestroy{Handle: h}} {
		if r := other.blas(m); backend.BlasStatus(r.Status) != backend.BlasNotInitialized {
			t.Fatalf("%s with another session's handle: %+v", m.Type(), r)
		}
	}
	if r := owner.blas(&wire.BlasSetMathMode{Handle: h, Mode: 1}); r.Status != 0 {
		t.Fatalf("owner's handle after the other's attempts: %+v", r)
	}
}

// FuzzBlas feeds arbitrary frames to a session whose seeds reach the cuBLAS dispatcher with a
// live handle: GEMMs of any shape, stride and scalar mode must be refused or computed, never
// crash the worker or run past memory (the simulated backend's GEMM reads every operand).
func FuzzBlas(f *testing.F) {
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	base := uint64(0x7f2c00000000)
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.BlasCreate{}, sgemm2(2, base, base, base, 1, 0), &wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.BlasCreate{}, &wire.BlasGemm{Handle: 2, Atype: 1, Btype: 1, Ctype: 1, Compute: 70, Transa: 1, Transb: 2,
		M: 3, N: 2, K: 4, PointerMode: 1, Alpha: base, Beta: base + 8, A: base, Lda: 4, StrideA: 16, B: base, Ldb: 2,
		StrideB: 8, C: base + 512, Ldc: 3, StrideC: 6, Batch: 3}, &wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.BlasCreate{}, &wire.BlasGemm{Handle: 2, Ex: 1, Atype: 2, Btype: 14,
		Ctype: 0, Compute: 64, Algo: -1, M: 4, N: 4, K: 4, Alpha: 0x3c00, A: base, Lda: 4, B: base + 64, Ldb: 4,
		C: base + 128, Ldc: 4, Batch: 2, StrideA: 16, StrideB: 16, StrideC: 16}, &wire.Synchronize{}))
	f.Add(seed(&wire.BlasCreate{}, &wire.StreamCreate{}, &wire.BlasSetStream{Handle: 1, Stream: 2},
		&wire.BlasSetMathMode{Handle: 1, Mode: 1}, &wire.BlasSetWorkspace{Handle: 1, Ptr: base, Bytes: 64},
		&wire.BlasDestroy{Handle: 1}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.BlasCreate{}, &wire.BlasTrsm{Handle: 2, Dbl: 1, Side: 1, Uplo: 1, Trans: 1,
		M: 3, N: 2, PointerMode: 1, Alpha: base, A: base + 64, Lda: 2, B: base + 128, Ldb: 3}, &wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.BlasCreate{}, &wire.MemcpyHtoD{Dst: base, Data: []byte{0, 1, 0, 0, 0x2c, 0x7f, 0, 0}},
		&wire.BlasGetrfBatched{Handle: 2, N: 2, Aarray: base, Lda: 2, Pivots: base + 64, Info: base + 96, Batch: 1},
		&wire.BlasGetrsBatched{Handle: 2, Trans: 1, N: 2, Nrhs: 1, Aarray: base, Lda: 2, Pivots: base + 64, Barray: base, Ldb: 2, Batch: 1},
		&wire.Synchronize{}))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}}, sim.New(1, 128<<20), false, in)
	})
}

package cuda

import (
	"math"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// TestGPUBlas runs NVIDIA's cuBLAS through the backend on a real GPU (scripts/gpu-run.sh): a
// handle on a stream with a workspace of the context's memory, SGEMM (B transposed) and a DGEMM
// batch with device-side scalars against CPU products, and refusals by handle and argument.
func TestGPUBlas(t *testing.T) {
	c := newCtx(t, openGPU(t))
	h := must(c.BlasCreate())
	s := must(c.StreamCreate(1))
	ws := must(c.MemAlloc(32 << 20))
	ok(t, c.BlasSetWorkspace(h, ws, 32<<20))
	ok(t, c.BlasSetStream(h, s)) // the workspace is set again after the stream changes
	ok(t, c.BlasSetMathMode(h, 0))

	// C(2x2) = 2 * A(2x3) * B(2x3)^T - C, column-major.
	a := []float32{1, 2, 3, 4, 5, 6} // [[1 3 5] [2 4 6]]
	b := []float32{1, 0, 0, 1, 1, 1} // [[1 0 1] [0 1 1]]
	cv := []float32{1, 1, 1, 1}
	dA, dB, dC := must(c.MemAlloc(24)), must(c.MemAlloc(24)), must(c.MemAlloc(16))
	ok(t, c.MemcpyHtoD(dA, floatBytes(a), 0, false))
	ok(t, c.MemcpyHtoD(dB, floatBytes(b), 0, false))
	ok(t, c.MemcpyHtoD(dC, floatBytes(cv), 0, false))
	ok(t, c.BlasGemm(backend.Gemm{Handle: h, AType: backend.DataR32F, BType: backend.DataR32F, CType: backend.DataR32F,
		Compute: backend.Compute32F, TransA: backend.BlasOpN, TransB: backend.BlasOpT,
		M: 2, N: 2, K: 3, Alpha: uint64(math.Float32bits(2)), Beta: uint64(math.Float32bits(-1)),
		A: dA, LdA: 2, B: dB, LdB: 2, C: dC, LdC: 2, Batch: 1}))
	ok(t, c.StreamSynchronize(s))
	got := make([]byte, 16)
	ok(t, c.MemcpyDtoH(got, dC, 0, false))
	// A*B^T = [[6 8] [8 10]] -> 2x - 1, column-major.
	if f := floats(got); f[0] != 11 || f[1] != 15 || f[2] != 15 || f[3] != 19 {
		t.Fatalf("SGEMM: %v", f)
	}

	// Two 2x1 = (2x2)(2x1) products in double, alpha and beta read from device memory.
	f64 := func(v ...float64) []byte {
		out := make([]byte, 8*len(v))
		for i, x := range v {
			bits := math.Float64bits(x)
			for j := range 8 {
				out[8*i+j] = byte(bits >> (8 * j))
			}
		}
		return out
	}
	dA2, dB2, dC2, dS := must(c.MemAlloc(64)), must(c.MemAlloc(32)), must(c.MemAlloc(32)), must(c.MemAlloc(16))
	ok(t, c.MemcpyHtoD(dA2, f64(1, 0, 0, 1, 2, 0, 0, 2), 0, false)) // I, 2I
	ok(t, c.MemcpyHtoD(dB2, f64(3, 4, 5, 6), 0, false))
	ok(t, c.MemcpyHtoD(dC2, f64(1, 1, 1, 1), 0, false))
	ok(t, c.MemcpyHtoD(dS, f64(0.5, 10), 0, false))
	ok(t, c.BlasGemm(backend.Gemm{Handle: h, AType: backend.DataR64F, BType: backend.DataR64F, CType: backend.DataR64F,
		Compute: backend.Compute64F, M: 2, N: 1, K: 2, DevicePtrs: true,
		Alpha: dS, Beta: dS + 8, A: dA2, LdA: 2, StrideA: 4, B: dB2, LdB: 2, StrideB: 2, C: dC2, LdC: 2, StrideC: 2, Batch: 2}))
	ok(t, c.StreamSynchronize(s))
	got = make([]byte, 32)
	ok(t, c.MemcpyDtoH(got, dC2, 0, false))
	want := []float64{11.5, 12, 15, 16} // 0.5*[3 4] + 10, 0.5*2*[5 6] + 10
	for i, w := range want {
		var bits uint64
		for j := range 8 {
			bits |= uint64(got[8*i+j]) << (8 * j)
		}
		if g := math.Float64frombits(bits); g != w {
			t.Fatalf("DGEMM batch element %d = %g, want %g", i, g, w)
		}
	}

	// GemmEx: half A (1 2 3 4) times the half identity into float C, alpha 2 (a float under
	// compute 32F).
	dH, dI, dF := must(c.MemAlloc(8)), must(c.MemAlloc(8)), must(c.MemAlloc(16))
	ok(t, c.MemcpyHtoD(dH, []byte{0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44}, 0, false))
	ok(t, c.MemcpyHtoD(dI, []byte{0x00, 0x3c, 0, 0, 0, 0, 0x00, 0x3c}, 0, false))
	ok(t, c.BlasGemm(backend.Gemm{Handle: h, Ex: true, AType: backend.DataR16F, BType: backend.DataR16F,
		CType: backend.DataR32F, Compute: backend.Compute32F, Algo: -1, M: 2, N: 2, K: 2,
		Alpha: uint64(math.Float32bits(2)), A: dH, LdA: 2, B: dI, LdB: 2, C: dF, LdC: 2, Batch: 1}))
	ok(t, c.StreamSynchronize(s))
	got = make([]byte, 16)
	ok(t, c.MemcpyDtoH(got, dF, 0, false))
	if f := floats(got); f[0] != 2 || f[1] != 4 || f[2] != 6 || f[3] != 8 {
		t.Fatalf("GemmEx half x half -> float: %v", f)
	}

	if err := c.BlasGemm(backend.Gemm{Handle: h, AType: backend.DataR32F, BType: backend.DataR32F, CType: backend.DataR32F,
		Compute: backend.Compute32F, M: 2, N: 2, K: 2, A: dA, LdA: 1, B: dB, LdB: 2, C: dC, LdC: 2, Batch: 1}); backend.BlasStatusOf(err) != backend.BlasInvalidValue {
		t.Fatalf("lda < m: %v", err)
	}
	ok(t, c.BlasDestroy(h))
	if err := c.BlasSetMathMode(h, 0); backend.BlasStatusOf(err) != backend.BlasNotInitialized {
		t.Fatalf("destroyed handle: %v", err)
	}
}

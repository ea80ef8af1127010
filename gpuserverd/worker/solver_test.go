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

// cuSOLVER's statuses these tests expect (cusolver_common.h).
const (
	solverNotInitialized = 1
	solverAllocFailed    = 2
	solverInvalidValue   = 3
	solverNotSupported   = 9
)

func solverCall(t testing.TB, name string, args ...uint64) *wire.SolverCall {
	return &wire.SolverCall{Fn: fnID(t, name), Args: u64s(args...)}
}

func (c *client) solver(name string, args ...uint64) wire.SolverReply {
	c.t.Helper()
	var r wire.SolverReply
	c.call(solverCall(c.t, name, args...), &r)
	return r
}

// LU factorisation and solve, and a symmetric eigen-solve, through the wire on the simulated
// backend: the size query waits for its answer, the computations go without a reply and their
// results are read back by copies.
func TestSolverThroughTheWire(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	r := c.solver("cusolverDnCreate", 1)
	h := r.O0
	if r.Status != 0 || h == 0 {
		t.Fatalf("create: %+v", r)
	}
	var sh wire.HandleReply
	c.call(&wire.StreamCreate{Flags: 1}, &sh)
	c.send(solverCall(t, "cusolverDnSetStream", h, sh.Handle), wire.FlagNoReply)
	a, b, ipiv, info := c.alloc(64), c.alloc(64), c.alloc(64), c.alloc(64)
	c.putF32(a, []float32{2, 1, 1, 3}) // [[2 1] [1 3]], column-major
	c.putF32(b, []float32{3, 5})
	if r := c.solver("cusolverDnSgetrf_bufferSize", h, 2, 2, a, 2, 1); r.Status != 0 || r.O0 != 2 {
		t.Fatalf("bufferSize: %+v", r)
	}
	c.send(solverCall(t, "cusolverDnSgetrf", h, 2, 2, a, 2, 0, ipiv, info), wire.FlagNoReply)
	c.send(solverCall(t, "cusolverDnSgetrs", h, 0, 2, 1, a, 2, ipiv, b, 2, info), wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.StreamSynchronize{Stream: sh.Handle}, &st)
	if st.Result != 0 {
		t.Fatalf("sync: %+v", st)
	}
	if x := c.getF32(b, 2); math.Abs(float64(x[0]-0.8)) > 1e-6 || math.Abs(float64(x[1]-1.4)) > 1e-6 {
		t.Fatalf("x = %v, want [0.8 1.4]", x)
	}
	// eigenvalues of [[2 1] [1 2]]: 1 and 3, ascending.
	w := c.alloc(64)
	c.putF32(a, []float32{2, 1, 1, 2})
	c.send(solverCall(t, "cusolverDnSsyevd", h, 1, 0, 2, a, 2, w, 0, 0, info), wire.FlagNoReply)
	c.call(&wire.StreamSynchronize{Stream: sh.Handle}, &st)
	if ev := c.getF32(w, 2); math.Abs(float64(ev[0]-1)) > 1e-6 || math.Abs(float64(ev[1]-3)) > 1e-6 {
		t.Fatalf("eigenvalues %v, want [1 3]", ev)
	}
	if r := c.solver("cusolverDnDestroy", h); r.Status != 0 {
		t.Fatalf("destroy: %+v", r)
	}
	if r := c.solver("cusolverDnSgetrf_bufferSize", h, 2, 2, a, 2, 1); r.Status != solverNotInitialized {
		t.Fatalf("a destroyed handle: %+v", r)
	}
}

// Refusals carry cuSOLVER's status and name what was wrong; a refused call sent without waiting
// surfaces at the next synchronising call.
func TestSolverRefusals(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.solver("cusolverDnCreate", 1).O0
	p := c.solver("cusolverDnCreateParams", 1).O0
	for _, tc := range []struct {
		what string
		m    *wire.SolverCall
		want int32
	}{
		{"unknown function", &wire.SolverCall{Fn: 11099, Args: u64s(h)}, solverNotSupported},
		{"a cuSPARSE function", &wire.SolverCall{Fn: fnID(t, "cusparseCreate"), Args: u64s(0)}, solverNotSupported},
		{"short args", &wire.SolverCall{Fn: fnID(t, "cusolverDnSgetrf_bufferSize"), Args: u64s(h, 2)}, solverInvalidValue},
		{"made-up handle", solverCall(t, "cusolverDnSgetrf_bufferSize", 999, 2, 2, 0, 2, 1), solverNotInitialized},
		{"params as a handle", solverCall(t, "cusolverDnSgetrf_bufferSize", p, 2, 2, 0, 2, 1), solverNotInitialized},
		{"handle as params", solverCall(t, "cusolverDnXpotrf_bufferSize", h, h, 0, 2, 0, 0, 2, 0, 1, 1), solverNotInitialized},
		{"host scratch too large", solverCall(t, "cusolverDnXpotrf", h, p, 0, 2, 0, 0, 2, 0, 0, 0, 1, backend.MaxHostWork+1, 0), solverInvalidValue},
		{"staged host array too long", solverCall(t, "cusolverDnSgesvdaStridedBatched", h, 1, 2, 2, 2, 0, 2, 4, 0, 2, 0, 2, 4, 0, 2, 4, 0, 0, 0, 0x7f0000001000, 1<<40), solverInvalidValue},
		{"staged host array not the session's memory", solverCall(t, "cusolverDnSgesvdaStridedBatched", h, 1, 2, 2, 2, 0, 2, 4, 0, 2, 0, 2, 4, 0, 2, 4, 0, 0, 0, 0x7f0000001000, 2), solverInvalidValue},
		{"negative order", solverCall(t, "cusolverDnSgetrf_bufferSize", h, 2, math.MaxUint64, 0, 2, 1), solverInvalidValue},
	} {
		var r wire.SolverReply
		c.call(tc.m, &r)
		if r.Status != tc.want || r.Message == "" {
			t.Errorf("%s: status %d (%q), want %d", tc.what, r.Status, r.Message, tc.want)
		}
	}
	c.send(solverCall(t, "cusolverDnSgetrf", 999, 2, 2, 0, 2, 0, 0, 0), wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidHandle {
		t.Fatalf("the refused call sent without waiting surfaced as %+v, want CUDA_ERROR_INVALID_HANDLE", st)
	}
}

// A computation's NULL params are NVIDIA's default algorithms (PyTorch's QR and single-matrix
// eigh pass NULL to Xgeqrf_bufferSize and Xsyevd_bufferSize): the worker hands them to the
// backend, here the simulated one, which does not compute the 64-bit API and says so. NULL
// params as the object a function works on stay refused.
func TestSolverNullParams(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.solver("cusolverDnCreate", 1).O0
	a, tau := c.alloc(64), c.alloc(64)
	for _, tc := range []struct {
		what string
		m    *wire.SolverCall
		want int32
	}{
		{"Xgeqrf_bufferSize", solverCall(t, "cusolverDnXgeqrf_bufferSize", h, 0, 2, 2, 1, a, 2, 1, tau, 1, 1, 1), solverNotSupported},
		{"Xsyevd_bufferSize", solverCall(t, "cusolverDnXsyevd_bufferSize", h, 0, 1, 0, 2, 1, a, 2, 1, tau, 1, 1, 1), solverNotSupported},
		{"SetAdvOptions", solverCall(t, "cusolverDnSetAdvOptions", 0, 0, 0), solverNotInitialized},
		{"DestroyParams", solverCall(t, "cusolverDnDestroyParams", 0), solverNotInitialized},
	} {
		var r wire.SolverReply
		c.call(tc.m, &r)
		if r.Status != tc.want {
			t.Errorf("%s with NULL params: status %d (%q), want %d", tc.what, r.Status, r.Message, tc.want)
		}
	}
}

// A session makes at most libMaxHandles handles (cuSOLVER's own device memory is not charged
// to its quota); destroying one makes room again.
func TestSolverHandlesAreBounded(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", Devices: []int{0}})
	var last uint64
	for i := 0; i < libMaxHandles; i++ {
		r := c.solver("cusolverDnCreate", 1)
		if r.Status != 0 {
			t.Fatalf("handle %d: %+v", i, r)
		}
		last = r.O0
	}
	if r := c.solver("cusolverDnCreate", 1); r.Status != solverAllocFailed || r.Message == "" {
		t.Fatalf("handle past the bound: %+v", r)
	}
	if r := c.solver("cusolverDnCreateParams", 1); r.Status != 0 {
		t.Fatalf("params past the handles' bound: %+v", r)
	}
	c.solver("cusolverDnDestroy", last)
	if r := c.solver("cusolverDnCreate", 1); r.Status != 0 {
		t.Fatalf("a handle after one was destroyed: %+v", r)
	}
}

// Handles are the session's own: another session's id is refused, and the owner's still works.
func TestSolverHandlesAreSessionLocal(t *testing.T) {
	owner := newSession(t, Config{Tier: "shared", TenantID: "a", Devices: []int{0}})
	other := newSession(t, Config{Tier: "shared", TenantID: "b", Devices: []int{0}})
	h := owner.solver("cusolverDnCreate", 1).O0
	for _, name := range []string{"cusolverDnSgetrf_bufferSize", "cusolverDnDestroy"} {
		args := []uint64{h, 2, 2, 0, 2, 1}
		if name == "cusolverDnDestroy" {
			args = args[:1]
		}
		if r := other.solver(name, args...); r.Status != solverNotInitialized {
			t.Fatalf("%s with another session's handle: %+v", name, r)
		}
	}
	if r := owner.solver("cusolverDnSgetrf_bufferSize", h, 2, 2, 0, 2, 1); r.Status != 0 {
		t.Fatalf("owner's handle after the other's attempts: %+v", r)
	}
}

// FuzzSolver feeds arbitrary frames to a session whose seeds reach the cuSOLVER dispatcher with a
// live handle: calls of any function, sizes and addresses must be refused or computed, never
// crash the worker or run past memory.
func FuzzSolver(f *testing.F) {
	seed := fuzzFrames
	base := uint64(0x7f2c00000000)
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, solverCall(f, "cusolverDnCreate", 1),
		solverCall(f, "cusolverDnDgetrf", 2, 4, 4, base, 4, 0, base+512, base+1024),
		solverCall(f, "cusolverDnDgetrs", 2, 0, 4, 2, base, 4, base+512, base+2048, 4, base+1024), &wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, solverCall(f, "cusolverDnCreate", 1),
		solverCall(f, "cusolverDnSsyevd", 2, 1, 1, 8, base, 8, base+512, 0, 0, base+1024), &wire.Synchronize{}))
	f.Add(seed(solverCall(f, "cusolverDnCreate", 1), solverCall(f, "cusolverDnCreateParams", 1),
		solverCall(f, "cusolverDnCreateSyevjInfo", 1), solverCall(f, "cusolverDnXsyevjSetTolerance", 3, math.Float64bits(1e-7)),
		solverCall(f, "cusolverDnDestroySyevjInfo", 3), solverCall(f, "cusolverDnDestroy", 1)))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, solverCall(f, "cusolverSpCreate", 0), &wire.SparseCall{Fn: fnID(f, "cusparseCreateMatDescr"), Args: u64s(0)},
		solverCall(f, "cusolverSpDcsrlsvluHost", 2, 2, 4, 3, base, base+64, base+128, base+256, 0, 0, base+512, 0),
		solverCall(f, "cusolverSpCreateCsrluInfoHost", 0), solverCall(f, "cusolverSpXcsrluAnalysisHost", 2, 2, 4, 3, base, base+64, 4),
		solverCall(f, "cusolverSpDcsrluExtractHost", 2, base, base+64, 3, base+128, base+256, base+512, 3, base+1024, base+2048, base+3072, 4, 0)))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}}, sim.New(1, 128<<20), false, in)
	})
}

// fuzzFrames is a fuzz seed: msgs as the frames of requests 1, 2, ...
func fuzzFrames(msgs ...wire.Message) []byte {
	var b []byte
	for i, m := range msgs {
		b = wire.AppendFrame(b, m, 0, uint32(i+1))
	}
	return b
}

// cusolverSp's host functions through the wire: their host arrays come staged in device memory
// (read before the call, the written ones written back after it), a reserved pointer must be
// NULL, and the sizes of cusolverSpXcsrluExtractHost's arrays are those earlier calls gave the
// session (XcsrluAnalysisHost's n), so a staged array past the bound is refused before the
// backend sees it.
func TestSolverSparseHostStaged(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	h := c.solver("cusolverSpCreate", 0).O0
	var d wire.SparseReply
	c.call(&wire.SparseCall{Fn: fnID(t, "cusparseCreateMatDescr"), Args: u64s(0)}, &d)
	if h == 0 || d.Status != 0 {
		t.Fatalf("create: %d, %+v", h, d)
	}
	md := d.O0
	// [[2 1] [1 3]] x = [3 5]: x = [0.8 1.4], zero-based CSR.
	rowPtr, colInd, val, b, x := c.alloc(64), c.alloc(64), c.alloc(64), c.alloc(64), c.alloc(64)
	putI32s := func(p uint64, v ...int32) {
		var bs []byte
		for _, e := range v {
			bs = binary.LittleEndian.AppendUint32(bs, uint32(e))
		}
		var st wire.Status
		c.call(&wire.MemcpyHtoD{Dst: p, Data: bs}, &st)
	}
	putI32s(rowPtr, 0, 2, 4)
	putI32s(colInd, 0, 1, 0, 1)
	c.putF32(val, []float32{2, 1, 1, 3})
	c.putF32(b, []float32{3, 5})
	r := c.solver("cusolverSpScsrlsvluHost", h, 2, 4, md, val, rowPtr, colInd, b, uint64(math.Float32bits(1e-6)), 0, x, 7)
	if r.Status != 0 || int32(r.O0) != -1 {
		t.Fatalf("csrlsvluHost: %+v", r)
	}
	if got := c.getF32(x, 2); math.Abs(float64(got[0]-0.8)) > 1e-6 || math.Abs(float64(got[1]-1.4)) > 1e-6 {
		t.Fatalf("x = %v, want [0.8 1.4]", got)
	}
	if r := c.solver("cusolverSpScsrlsvluHost", h, 2, 4, h, val, rowPtr, colInd, b, 0, 0, x, 7); r.Status != solverNotInitialized {
		t.Fatalf("a cuSOLVER handle as cuSPARSE's descriptor: %+v", r)
	}
	if r := c.solver("cusolverSpXcsrmetisndHost", h, 2, 4, md, rowPtr, colInd, 0x1000, x); r.Status != solverInvalidValue {
		t.Fatalf("a reserved pointer that is not NULL: %+v", r)
	}
	lu := c.solver("cusolverSpCreateCsrluInfoHost", 0).O0
	c.solver("cusolverSpXcsrluAnalysisHost", h, 1<<40, 4, md, 0, 0, lu) // n remembered, whatever the backend says
	r = c.solver("cusolverSpDcsrluExtractHost", h, x, 0, md, 0, 0, 0, md, 0, 0, 0, lu, 0)
	if r.Status != solverInvalidValue || !strings.Contains(r.Message, "elements") {
		t.Fatalf("a staged array of a remembered size past the bound: %+v", r)
	}
}

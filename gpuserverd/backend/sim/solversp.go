package sim

import (
	"math"

	"gpucloud/gpuserverd/backend"
)

// The simulated cuSOLVER's sparse API (a test double of NVIDIA's): handles, and the high-level
// host solvers csrlsvluHost, csrlsvqrHost and csrlsvcholHost in single and double precision, which
// NVIDIA runs on the CPU over host arrays (here they come staged through device memory by the
// worker). All three solve A x = b by dense LU with partial pivoting of the CSR matrix (at most
// MaxSolverN rows), which gives the same x for the nonsingular systems a test builds; singularity
// is -1 or the first zero pivot. Orderings, the low-level and refactorisation APIs are only run by
// NVIDIA's library (the GPU run); their infos are made and destroyed here.
type (
	spHandleSolver struct{ stream backend.Handle }
	spInfo         struct{ kind string } // a low-level API's info: made and destroyed, never computed with
)

func init() {
	solverCalls["cusolverSpCreate"] = spCreate(func(*libCall) (any, error) { return &spHandleSolver{}, nil })
	solverCalls["cusolverSpDestroy"] = spDestroy[*spHandleSolver]
	solverCalls["cusolverSpSetStream"] = libSetStream(func(o *spHandleSolver) *backend.Handle { return &o.stream })
	for _, k := range []string{"CsrqrInfo", "CsrqrInfoHost", "CsrcholInfo", "CsrcholInfoHost", "CsrluInfoHost"} {
		solverCalls["cusolverSpCreate"+k] = spCreate(func(*libCall) (any, error) { return &spInfo{kind: k}, nil })
		solverCalls["cusolverSpDestroy"+k] = func(l *libCall) ([]uint64, error) {
			if o, err := libObject[*spInfo](l, 0); err != nil || o.kind != k {
				return nil, backend.LibBadObject(l.Func, "no %s %#x", k, l.word(0))
			}
			l.c.dropLibObj(l.word(0))
			return nil, nil
		}
	}
	for _, p := range []string{"S", "D"} {
		for _, op := range []string{"csrlsvluHost", "csrlsvqrHost", "csrlsvcholHost"} {
			solverCalls["cusolverSp"+p+op] = spSolveHost
		}
	}
}

// spSolveHost: handle, n, nnz, descrA, csrVal, csrRowPtr, csrColInd, b, tol, reorder, x, singularity.
func spSolveHost(l *libCall) ([]uint64, error) {
	if _, err := libObject[*spHandleSolver](l, 0); err != nil {
		return nil, err
	}
	d, err := libObject[*matDescr](l, 3)
	if err != nil {
		return nil, err
	}
	n, nnz := int(l.i32(1)), int(l.i32(2))
	if n < 1 || n > MaxSolverN || nnz < 0 || nnz > n*n {
		return nil, l.invalid("n %d (the simulated backend takes 1 to %d), nnz %d", n, MaxSolverN, nnz)
	}
	typ := backend.DataR32F
	if l.Func.Name[len("cusolverSp")] == 'D' {
		typ = backend.DataR64F
	}
	val, rowPtr, colInd, b, x := l.Host[4], l.Host[5], l.Host[6], l.Host[7], l.Host[10]
	if val == nil || rowPtr == nil || colInd == nil || b == nil || x == nil {
		return nil, l.invalid("a NULL array")
	}
	base := int(d.v[3])
	tol := l.f64(8)
	if typ == backend.DataR32F {
		tol = float64(l.f32(8))
	}
	A := make([]byte, 8*n*n) // dense, column-major, in double
	for i := 0; i < n; i++ {
		lo, hi := int(getI32(rowPtr, i))-base, int(getI32(rowPtr, i+1))-base
		if lo < 0 || hi < lo || hi > nnz {
			return nil, l.invalid("row %d: offsets %d to %d of %d", i, lo, hi, nnz)
		}
		for k := lo; k < hi; k++ {
			j := int(getI32(colInd, k)) - base
			if j < 0 || j >= n {
				return nil, l.invalid("row %d: column %d", i, j)
			}
			store(backend.DataR64F, A, uint64(i+j*n), load(backend.DataR64F, A, uint64(i+j*n))+load(typ, val, uint64(k)))
		}
	}
	ipiv := make([]byte, 4*n)
	sing := int32(-1)
	if info := luFactor(backend.DataR64F, A, ipiv, n, n); info > 0 {
		sing = int32(info - 1)
	}
	for k := 0; k < n && sing < 0; k++ {
		if math.Abs(load(backend.DataR64F, A, uint64(k+k*n))) <= tol {
			sing = int32(k)
		}
	}
	if sing < 0 {
		B := make([]byte, 8*n)
		for i := 0; i < n; i++ {
			store(backend.DataR64F, B, uint64(i), load(typ, b, uint64(i)))
		}
		luSolve(backend.DataR64F, A, ipiv, B, n, 1, n, n)
		for i := 0; i < n; i++ {
			store(typ, x, uint64(i), load(backend.DataR64F, B, uint64(i)))
		}
	}
	return []uint64{uint64(uint32(sing))}, nil // an int output's 4 bytes
}

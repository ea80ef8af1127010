package sim

import (
	"encoding/binary"
	"math"
	"strings"

	"gpucloud/gpuserverd/backend"
)

// MaxSolverN bounds a simulated factorisation's order: it runs on one CPU core.
const MaxSolverN = 256

// The simulated cuSOLVER (a test double of NVIDIA's): handles run their calls on the CPU, on their
// stream's goroutine, over the context's simulated memory. It computes the real-valued LU
// (getrf/getrs) and symmetric eigen-solve (syevd, by Jacobi rotations) in single and double
// precision; params and infos are made and destroyed; anything else is
// CUSOLVER_STATUS_NOT_SUPPORTED.
type (
	dnHandle struct{ stream backend.Handle }
	dnParams struct{}
	dnSyevj  struct{}
	dnGesvdj struct{}
)

var solverCalls = map[string]func(*libCall) ([]uint64, error){
	"cusolverDnCreate":            spCreate(func(*libCall) (any, error) { return &dnHandle{}, nil }),
	"cusolverDnCreateParams":      spCreate(func(*libCall) (any, error) { return &dnParams{}, nil }),
	"cusolverDnCreateSyevjInfo":   spCreate(func(*libCall) (any, error) { return &dnSyevj{}, nil }),
	"cusolverDnCreateGesvdjInfo":  spCreate(func(*libCall) (any, error) { return &dnGesvdj{}, nil }),
	"cusolverDnDestroyParams":     spDestroy[*dnParams],
	"cusolverDnDestroySyevjInfo":  spDestroy[*dnSyevj],
	"cusolverDnDestroyGesvdjInfo": spDestroy[*dnGesvdj],
	"cusolverDnDestroy": func(l *libCall) ([]uint64, error) {
		h, err := libObject[*dnHandle](l, 0)
		if err != nil {
			return nil, err
		}
		if s, err := l.c.stream(h.stream); err == nil {
			s.sync() // cusolverDnDestroy waits for the handle's work
		}
		l.c.dropLibObj(l.word(0))
		return nil, nil
	},
	"cusolverDnSetStream": libSetStream(func(o *dnHandle) *backend.Handle { return &o.stream }),
}

func init() {
	accept := func(l *libCall) ([]uint64, error) { return nil, nil } // the simulated solvers have no tunables
	for _, n := range []string{"cusolverDnXsyevjSetTolerance", "cusolverDnXsyevjSetMaxSweeps", "cusolverDnXsyevjSetSortEig",
		"cusolverDnXgesvdjSetTolerance", "cusolverDnXgesvdjSetMaxSweeps", "cusolverDnXgesvdjSetSortEig", "cusolverDnSetAdvOptions"} {
		solverCalls[n] = accept
	}
	for _, p := range []string{"S", "D"} {
		for _, op := range []string{"getrf_bufferSize", "syevd_bufferSize", "getrf", "getrs", "syevd"} {
			solverCalls["cusolverDn"+p+op] = solverCompute
		}
	}
}

// solverCompute checks a computation's sizes at once, as cuSOLVER does, and queues it on the
// handle's stream.
func solverCompute(l *libCall) ([]uint64, error) {
	h, err := libObject[*dnHandle](l, 0)
	if err != nil {
		return nil, err
	}
	name := strings.TrimPrefix(l.Func.Name, "cusolverDn")
	typ := backend.DataR32F
	if name[0] == 'D' {
		typ = backend.DataR64F
	}
	i32 := func(i int) int { return int(l.i32(i)) }
	sq := func(n, lda int) error {
		if n < 0 || n > MaxSolverN || lda < max(1, n) {
			return l.invalid("n %d (the simulated backend takes at most %d), lda %d", n, MaxSolverN, lda)
		}
		return nil
	}
	es := 4
	if typ == backend.DataR64F {
		es = 8
	}
	c := l.c
	// mat views a matrix of cols columns of ld elements; ints a device array of n int32s.
	mat := func(p uint64, ld, cols int) ([]byte, error) { return c.mem.view(p, uint64(es*ld*cols)) }
	ints := func(p uint64, n int) ([]byte, error) { return c.mem.view(p, uint64(4*max(n, 1))) }
	var run func() error
	switch op := name[1:]; op {
	case "getrf_bufferSize", "syevd_bufferSize":
		n, lda := i32(2), i32(4)      // getrf: handle, m, n, A, lda, Lwork
		if op == "syevd_bufferSize" { // handle, jobz, uplo, n, A, lda, W, lwork
			n, lda = i32(3), i32(5)
		}
		if err := sq(n, lda); err != nil {
			return nil, err
		}
		return []uint64{uint64(n)}, nil // the simulated solvers need no workspace; report n elements
	case "getrf": // handle, m, n, A, lda, Workspace, devIpiv, devInfo
		m, n, lda := i32(1), i32(2), i32(4)
		if m != n {
			return nil, backend.LibNotSupported(l.Func, "the simulated getrf takes square matrices")
		}
		if err := sq(n, lda); err != nil {
			return nil, err
		}
		run = func() error {
			A, err := mat(l.word(3), lda, n)
			if err != nil {
				return err
			}
			ipiv, err := ints(l.word(6), n)
			if err != nil {
				return err
			}
			info, err := ints(l.word(7), 1)
			if err != nil {
				return err
			}
			putI32(info, 0, int32(luFactor(typ, A, ipiv, n, lda)))
			return nil
		}
	case "getrs": // handle, trans, n, nrhs, A, lda, devIpiv, B, ldb, devInfo
		n, nrhs, lda, ldb := i32(2), i32(3), i32(5), i32(8)
		if err := sq(n, lda); err != nil {
			return nil, err
		}
		if i32(1) != 0 || nrhs < 0 || nrhs > MaxSolverN || ldb < max(1, n) {
			return nil, l.invalid("trans %d (the simulated getrs solves A X = B only), nrhs %d, ldb %d", i32(1), nrhs, ldb)
		}
		run = func() error {
			A, err := mat(l.word(4), lda, n)
			if err != nil {
				return err
			}
			ipiv, err := ints(l.word(6), n)
			if err != nil {
				return err
			}
			B, err := mat(l.word(7), ldb, nrhs)
			if err != nil {
				return err
			}
			info, err := ints(l.word(9), 1)
			if err != nil {
				return err
			}
			luSolve(typ, A, ipiv, B, n, nrhs, lda, ldb)
			putI32(info, 0, 0)
			return nil
		}
	case "syevd": // handle, jobz, uplo, n, A, lda, W, work, lwork, devInfo
		n, lda := i32(3), i32(5)
		if err := sq(n, lda); err != nil {
			return nil, err
		}
		run = func() error {
			A, err := mat(l.word(4), lda, n)
			if err != nil {
				return err
			}
			W, err := mat(l.word(6), n, 1)
			if err != nil {
				return err
			}
			info, err := ints(l.word(9), 1)
			if err != nil {
				return err
			}
			symEigen(typ, A, W, n, lda, i32(1) == 1, i32(2))
			putI32(info, 0, 0)
			return nil
		}
	}
	return nil, l.launch(h.stream, run)
}

func putI32(b []byte, i int, v int32) { binary.LittleEndian.PutUint32(b[4*i:], uint32(v)) }
func getI32(b []byte, i int) int32    { return int32(binary.LittleEndian.Uint32(b[4*i:])) }

// luFactor is LAPACK's getrf with partial pivoting, column-major, in place; pivots 1-based. It
// returns info: 0, or i+1 where U(i,i) is exactly zero.
func luFactor(t uint32, A, ipiv []byte, n, lda int) int {
	at := func(i, j int) uint64 { return uint64(i + j*lda) }
	info := 0
	for k := 0; k < n; k++ {
		p := k
		for i := k + 1; i < n; i++ {
			if math.Abs(load(t, A, at(i, k))) > math.Abs(load(t, A, at(p, k))) {
				p = i
			}
		}
		putI32(ipiv, k, int32(p+1))
		if p != k {
			for j := 0; j < n; j++ {
				x, y := load(t, A, at(k, j)), load(t, A, at(p, j))
				store(t, A, at(k, j), y)
				store(t, A, at(p, j), x)
			}
		}
		d := load(t, A, at(k, k))
		if d == 0 {
			if info == 0 {
				info = k + 1
			}
			continue
		}
		for i := k + 1; i < n; i++ {
			l := load(t, A, at(i, k)) / d
			store(t, A, at(i, k), l)
			for j := k + 1; j < n; j++ {
				store(t, A, at(i, j), load(t, A, at(i, j))-l*load(t, A, at(k, j)))
			}
		}
	}
	return info
}

// luSolve is getrs with trans N: B := A^-1 B from getrf's factors.
func luSolve(t uint32, A, ipiv, B []byte, n, nrhs, lda, ldb int) {
	at := func(i, j int) uint64 { return uint64(i + j*lda) }
	bt := func(i, j int) uint64 { return uint64(i + j*ldb) }
	for c := 0; c < nrhs; c++ {
		for k := 0; k < n; k++ {
			if p := int(getI32(ipiv, k)) - 1; p != k && p >= 0 && p < n {
				x, y := load(t, B, bt(k, c)), load(t, B, bt(p, c))
				store(t, B, bt(k, c), y)
				store(t, B, bt(p, c), x)
			}
		}
		for i := 0; i < n; i++ { // L y = Pb, unit diagonal
			v := load(t, B, bt(i, c))
			for j := 0; j < i; j++ {
				v -= load(t, A, at(i, j)) * load(t, B, bt(j, c))
			}
			store(t, B, bt(i, c), v)
		}
		for i := n - 1; i >= 0; i-- { // U x = y
			v := load(t, B, bt(i, c))
			for j := i + 1; j < n; j++ {
				v -= load(t, A, at(i, j)) * load(t, B, bt(j, c))
			}
			store(t, B, bt(i, c), v/load(t, A, at(i, i)))
		}
	}
}

// symEigen is syevd by cyclic Jacobi rotations: the eigenvalues ascending into W and, with
// vectors, the eigenvectors into A's columns. uplo (0 lower, 1 upper) names the triangle read.
func symEigen(t uint32, A, W []byte, n, lda int, vectors bool, uplo int) {
	a := make([]float64, n*n)
	for j := 0; j < n; j++ {
		for i := 0; i < n; i++ {
			r, c := i, j
			if (uplo == 0) != (i >= j) { // read the named triangle only
				r, c = j, i
			}
			a[i+j*n] = load(t, A, uint64(r+c*lda))
		}
	}
	v := make([]float64, n*n)
	for i := 0; i < n; i++ {
		v[i+i*n] = 1
	}
	for sweep := 0; sweep < 100; sweep++ {
		off := 0.0
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				off += a[p+q*n] * a[p+q*n]
			}
		}
		if off < 1e-30 {
			break
		}
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				if a[p+q*n] == 0 {
					continue
				}
				theta := (a[q+q*n] - a[p+p*n]) / (2 * a[p+q*n])
				tt := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				cs := 1 / math.Sqrt(tt*tt+1)
				sn := tt * cs
				for k := 0; k < n; k++ { // columns p, q
					akp, akq := a[k+p*n], a[k+q*n]
					a[k+p*n], a[k+q*n] = cs*akp-sn*akq, sn*akp+cs*akq
				}
				for k := 0; k < n; k++ { // rows p, q
					apk, aqk := a[p+k*n], a[q+k*n]
					a[p+k*n], a[q+k*n] = cs*apk-sn*aqk, sn*apk+cs*aqk
				}
				for k := 0; k < n; k++ {
					vkp, vkq := v[k+p*n], v[k+q*n]
					v[k+p*n], v[k+q*n] = cs*vkp-sn*vkq, sn*vkp+cs*vkq
				}
			}
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	for i := 1; i < n; i++ { // insertion sort by eigenvalue
		for j := i; j > 0 && a[order[j]*(n+1)] < a[order[j-1]*(n+1)]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for k, o := range order {
		store(t, W, uint64(k), a[o*(n+1)])
		if vectors {
			for i := 0; i < n; i++ {
				store(t, A, uint64(i+k*lda), v[i+o*n])
			}
		}
	}
}

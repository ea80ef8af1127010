package backend

import "fmt"

// MaxBlasBatch bounds a batched cuBLAS call's matrix count (each matrix is a device pointer the
// worker or cuBLAS reads from an array of the caller's).
const MaxBlasBatch = 1 << 24

// Trsm is cublas<t>trsm_v2: op(A) X = alpha B (Side 0, left) or X op(A) = alpha B (Side 1,
// right), column-major, X overwriting B (M x N); A is triangular (Uplo 0 lower, 1 upper; Diag 1:
// unit diagonal, not read), M x M on the left, N x N on the right.
type Trsm struct {
	Handle                  Handle
	Double                  bool // double (D) rather than float (S)
	Side, Uplo, Trans, Diag uint32
	M, N                    int32
	DevicePtrs              bool   // Alpha is a device address of the scalar
	Alpha                   uint64 // the scalar's bytes, little-endian, unless DevicePtrs
	A, B                    uint64
	LdA, LdB                int32
}

// Elem is the size of one element.
func (t *Trsm) Elem() uint64 { return elemSize(t.Double) }

// K is A's order: M on the left, N on the right.
func (t *Trsm) K() int32 {
	if t.Side == 0 {
		return t.M
	}
	return t.N
}

// Validate checks what cuBLAS checks before launching: a bad argument is
// CUBLAS_STATUS_INVALID_VALUE naming it.
func (t *Trsm) Validate() error {
	bad := func(f string, a ...any) error {
		return &BlasError{Op: "trsm", Status: BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
	}
	switch {
	case t.Side > 1:
		return bad("side %d", t.Side)
	case t.Uplo > 1:
		return bad("uplo %d", t.Uplo)
	case t.Trans > BlasOpC:
		return bad("operation %d", t.Trans)
	case t.Diag > 1:
		return bad("diag %d", t.Diag)
	case t.M < 0 || t.N < 0:
		return bad("negative size m=%d n=%d", t.M, t.N)
	case t.LdA < max(1, t.K()):
		return bad("lda %d < %d rows", t.LdA, max(1, t.K()))
	case t.LdB < max(1, t.M):
		return bad("ldb %d < %d rows", t.LdB, max(1, t.M))
	}
	return nil
}

// Spans are the byte extents of A and B the solve reads or writes (t must be valid).
func (t *Trsm) Spans() (a, b uint64) {
	k := t.K()
	if t.M == 0 || t.N == 0 {
		k = 0
	}
	return Span(k, k, t.LdA, 0, 1, t.Elem()), Span(t.M, t.N, t.LdB, 0, 1, t.Elem())
}

func elemSize(double bool) uint64 {
	if double {
		return 8
	}
	return 4
}

// GetrfBatched is cublas<t>getrfBatched: the LU factorisation with partial pivoting of Batch
// N x N matrices in place. A is the device address of Batch device pointers; Pivots (0: none,
// no pivoting) holds Batch*N ints and Info Batch ints, in device memory.
type GetrfBatched struct {
	Handle       Handle
	Double       bool
	N            int32
	A            uint64
	LdA          int32
	Pivots, Info uint64
	Batch        int32
}

// Validate checks the arguments as cuBLAS does.
func (g *GetrfBatched) Validate() error {
	bad := func(f string, a ...any) error {
		return &BlasError{Op: "getrfBatched", Status: BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
	}
	switch {
	case g.N < 0:
		return bad("negative n %d", g.N)
	case g.LdA < max(1, g.N):
		return bad("lda %d < %d rows", g.LdA, max(1, g.N))
	case g.Batch < 0 || g.Batch > MaxBlasBatch:
		return bad("batch count %d (at most %d)", g.Batch, MaxBlasBatch)
	case g.Batch > 0 && (g.A == 0 || g.Info == 0):
		return bad("null Aarray or infoArray")
	}
	return nil
}

// GetrsBatched is cublas<t>getrsBatched: solves op(A) X = B with GetrfBatched's factors (A,
// Pivots) for Batch right-hand sides (B: device array of device pointers to N x NRHS matrices,
// X overwriting them).
type GetrsBatched struct {
	Handle  Handle
	Double  bool
	Trans   uint32
	N, NRHS int32
	A       uint64
	LdA     int32
	Pivots  uint64
	B       uint64
	LdB     int32
	Batch   int32
}

// Validate checks the arguments as cuBLAS does; Arg is the 1-based position of the bad one
// (cublas<t>getrsBatched's info is its negation).
func (g *GetrsBatched) Validate() (arg int, err error) {
	bad := func(i int, f string, a ...any) (int, error) {
		return i, &BlasError{Op: "getrsBatched", Status: BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
	}
	switch {
	case g.Trans > BlasOpC:
		return bad(2, "operation %d", g.Trans)
	case g.N < 0:
		return bad(3, "negative n %d", g.N)
	case g.NRHS < 0:
		return bad(4, "negative nrhs %d", g.NRHS)
	case g.LdA < max(1, g.N):
		return bad(6, "lda %d < %d rows", g.LdA, max(1, g.N))
	case g.LdB < max(1, g.N):
		return bad(9, "ldb %d < %d rows", g.LdB, max(1, g.N))
	case g.Batch < 0 || g.Batch > MaxBlasBatch:
		return bad(11, "batch count %d (at most %d)", g.Batch, MaxBlasBatch)
	case g.Batch > 0 && (g.A == 0 || g.B == 0):
		return bad(5, "null Aarray or Barray")
	}
	return 0, nil
}

package backend

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// BlasStatus is a cuBLAS status code (cublasStatus_t); BlasSuccess is 0.
type BlasStatus int32

// The cuBLAS codes gpuserverd produces or passes through (cublas_api.h).
const (
	BlasSuccess         BlasStatus = 0
	BlasNotInitialized  BlasStatus = 1
	BlasAllocFailed     BlasStatus = 3
	BlasInvalidValue    BlasStatus = 7
	BlasArchMismatch    BlasStatus = 8
	BlasMappingError    BlasStatus = 11
	BlasExecutionFailed BlasStatus = 13
	BlasInternalError   BlasStatus = 14
	BlasNotSupported    BlasStatus = 15
	BlasLicenseError    BlasStatus = 16
)

// BlasError is a failed cuBLAS call. It unwraps to the CUDA code the failure stands for, so an
// error of a GEMM sent without waiting surfaces at the next synchronising call as a CUDA error.
type BlasError struct {
	Op     string
	Status BlasStatus
	Detail string
}

func (e *BlasError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("cublas: %s: %s (%d): %s", e.Op, e.Status.Name(), int32(e.Status), e.Detail)
	}
	return fmt.Sprintf("cublas: %s: %s (%d)", e.Op, e.Status.Name(), int32(e.Status))
}

// Unwrap gives the CUDA code: bad arguments and handles as the driver's own, failures of
// execution as a failed launch.
func (e *BlasError) Unwrap() error {
	switch e.Status {
	case BlasNotInitialized:
		return ErrInvalidHandle
	case BlasAllocFailed:
		return ErrOutOfMemory
	case BlasInvalidValue:
		return ErrInvalidValue
	case BlasNotSupported, BlasArchMismatch:
		return ErrNotSupported
	}
	return ErrLaunchFailed
}

// Name is the status's cublasStatus_t name.
func (s BlasStatus) Name() string {
	switch s {
	case BlasSuccess:
		return "CUBLAS_STATUS_SUCCESS"
	case BlasNotInitialized:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case BlasAllocFailed:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case BlasInvalidValue:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case BlasArchMismatch:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case BlasMappingError:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case BlasExecutionFailed:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case BlasInternalError:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case BlasNotSupported:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case BlasLicenseError:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return "CUBLAS_STATUS_UNKNOWN"
}

// BlasStatusOf is the cuBLAS status of err: a BlasError's own; for a CUDA error (a bad stream,
// a dead context) the status cuBLAS gives such failures.
func BlasStatusOf(err error) BlasStatus {
	if err == nil {
		return BlasSuccess
	}
	var be *BlasError
	if errors.As(err, &be) {
		return be.Status
	}
	switch ResultOf(err) {
	case ErrInvalidHandle:
		return BlasNotInitialized
	case ErrInvalidValue:
		return BlasInvalidValue
	case ErrOutOfMemory:
		return BlasAllocFailed
	case ErrNotSupported:
		return BlasNotSupported
	}
	return BlasInternalError
}

// Element types of a GEMM.
const (
	BlasFloat  uint32 = 0
	BlasDouble uint32 = 1
)

// Operations on a GEMM operand (cublasOperation_t).
const (
	BlasOpN uint32 = 0
	BlasOpT uint32 = 1
	BlasOpC uint32 = 2 // for real types the same as T
)

// Gemm is C = alpha*op(A)*op(B) + beta*C, column-major, Batch times with the element strides
// between consecutive matrices (cublas<t>gemmStridedBatched; Batch 1 is cublas<t>gemm).
type Gemm struct {
	Handle      Handle
	Type        uint32 // BlasFloat or BlasDouble
	TransA      uint32
	TransB      uint32
	M, N, K     int32
	DevicePtrs  bool   // Alpha and Beta are device addresses of the scalars
	Alpha, Beta uint64 // the scalars' bits (a float in the low 32) unless DevicePtrs
	A, B, C     uint64
	LdA, LdB    int32
	LdC         int32
	StrideA     int64
	StrideB     int64
	StrideC     int64
	Batch       int32
}

// ElemSize is the size of one element of g's type.
func (g *Gemm) ElemSize() uint64 {
	if g.Type == BlasDouble {
		return 8
	}
	return 4
}

// Rows and columns of op(A) stored: A is ka x kb as stored (before the operation).
func (g *Gemm) shapeA() (rows, cols int32) {
	if g.TransA == BlasOpN {
		return g.M, g.K
	}
	return g.K, g.M
}

func (g *Gemm) shapeB() (rows, cols int32) {
	if g.TransB == BlasOpN {
		return g.K, g.N
	}
	return g.N, g.K
}

// Validate checks what cuBLAS checks before it launches anything (and what the guest library
// checks before sending): a bad argument is CUBLAS_STATUS_INVALID_VALUE naming it.
func (g *Gemm) Validate() error {
	bad := func(f string, a ...any) error {
		return &BlasError{Op: "gemm", Status: BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
	}
	if g.Type != BlasFloat && g.Type != BlasDouble {
		return bad("element type %d", g.Type)
	}
	if g.TransA > BlasOpC || g.TransB > BlasOpC {
		return bad("operation %d/%d", g.TransA, g.TransB)
	}
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return bad("negative size m=%d n=%d k=%d", g.M, g.N, g.K)
	}
	ra, _ := g.shapeA()
	rb, _ := g.shapeB()
	if g.LdA < max(1, ra) {
		return bad("lda %d < %d rows", g.LdA, max(1, ra))
	}
	if g.LdB < max(1, rb) {
		return bad("ldb %d < %d rows", g.LdB, max(1, rb))
	}
	if g.LdC < max(1, g.M) {
		return bad("ldc %d < %d rows", g.LdC, max(1, g.M))
	}
	if g.Batch < 1 {
		return bad("batch count %d", g.Batch)
	}
	if g.Batch > 1 && (g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0) {
		return bad("negative stride")
	}
	return nil
}

// Span is how many bytes from its base an operand of rows x cols with leading dimension ld and
// batch matrices stride elements apart reaches; 0 for an empty operand, and math.MaxUint64 when
// that does not fit in 64 bits (no memory holds it).
func Span(rows, cols, ld int32, stride int64, batch int32, elem uint64) uint64 {
	if rows <= 0 || cols <= 0 || batch <= 0 || ld <= 0 || stride < 0 {
		return 0
	}
	last := uint64(cols-1)*uint64(ld) + uint64(rows) // < 2^63: no overflow
	hi, lo := bits.Mul64(uint64(batch-1), uint64(stride))
	n, carry := bits.Add64(lo, last, 0)
	if hi != 0 || carry != 0 {
		return math.MaxUint64
	}
	hi, b := bits.Mul64(n, elem)
	if hi != 0 {
		return math.MaxUint64
	}
	return b
}

// Spans are the byte extents of A, B and C that g reads or writes.
func (g *Gemm) Spans() (a, b, c uint64) {
	e := g.ElemSize()
	ra, ca := g.shapeA()
	rb, cb := g.shapeB()
	if g.K == 0 {
		ra, rb = 0, 0 // op(A) and op(B) are not read
	}
	return Span(ra, ca, g.LdA, g.StrideA, g.Batch, e), Span(rb, cb, g.LdB, g.StrideB, g.Batch, e),
		Span(g.M, g.N, g.LdC, g.StrideC, g.Batch, e)
}

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

// Element types (cudaDataType_t) a GEMM may name.
const (
	DataR32F  uint32 = 0
	DataR64F  uint32 = 1
	DataR16F  uint32 = 2
	DataR8I   uint32 = 3
	DataR32I  uint32 = 10
	DataR16BF uint32 = 14
)

// DataSize is the size of one element of type t; false for a type GEMM does not take.
func DataSize(t uint32) (uint64, bool) {
	switch t {
	case DataR8I:
		return 1, true
	case DataR16F, DataR16BF:
		return 2, true
	case DataR32F, DataR32I:
		return 4, true
	case DataR64F:
		return 8, true
	}
	return 0, false
}

// Compute types (cublasComputeType_t) that cublasGemmEx takes.
const (
	Compute16F           uint32 = 64
	Compute16FPedantic   uint32 = 65
	Compute32F           uint32 = 68
	Compute32FPedantic   uint32 = 69
	Compute64F           uint32 = 70
	Compute64FPedantic   uint32 = 71
	Compute32I           uint32 = 72
	Compute32IPedantic   uint32 = 73
	Compute32FFast16F    uint32 = 74
	Compute32FFast16BF   uint32 = 75
	Compute32FFastTF32   uint32 = 77
	Compute32FEmulBF16x9 uint32 = 78
)

// ScalarType is the type of alpha and beta under compute type c; false for an unknown one.
func ScalarType(c uint32) (uint32, bool) {
	switch c {
	case Compute16F, Compute16FPedantic:
		return DataR16F, true
	case Compute32F, Compute32FPedantic, Compute32FFast16F, Compute32FFast16BF, Compute32FFastTF32, Compute32FEmulBF16x9:
		return DataR32F, true
	case Compute64F, Compute64FPedantic:
		return DataR64F, true
	case Compute32I, Compute32IPedantic:
		return DataR32I, true
	}
	return 0, false
}

// Operations on a GEMM operand (cublasOperation_t).
const (
	BlasOpN uint32 = 0
	BlasOpT uint32 = 1
	BlasOpC uint32 = 2 // for real types the same as T
)

// Gemm is C = alpha*op(A)*op(B) + beta*C, column-major, Batch times with the element strides
// between consecutive matrices: cublas<t>gemm (Ex false: all types R_32F with Compute32F, or
// R_64F with Compute64F) or cublasGemmEx, and their strided-batched forms for Batch > 1.
type Gemm struct {
	Handle              Handle
	Ex                  bool
	AType, BType, CType uint32 // cudaDataType_t
	Compute             uint32 // cublasComputeType_t
	Algo                int32  // cublasGemmAlgo_t (Ex only)
	TransA, TransB      uint32
	M, N, K             int32
	DevicePtrs          bool   // Alpha and Beta are device addresses of the scalars
	Alpha, Beta         uint64 // the scalars' bytes, little-endian, unless DevicePtrs
	A, B, C             uint64
	LdA, LdB, LdC       int32
	StrideA             int64
	StrideB             int64
	StrideC             int64
	Batch               int32
}

// SGEMM and DGEMM's types.
func (g *Gemm) isS() bool {
	return g.AType == DataR32F && g.BType == DataR32F && g.CType == DataR32F && g.Compute == Compute32F
}
func (g *Gemm) isD() bool {
	return g.AType == DataR64F && g.BType == DataR64F && g.CType == DataR64F && g.Compute == Compute64F
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
	if !g.Ex && !g.isS() && !g.isD() {
		return bad("types %d/%d/%d compute %d: not SGEMM's or DGEMM's", g.AType, g.BType, g.CType, g.Compute)
	}
	for _, t := range []uint32{g.AType, g.BType, g.CType} {
		if _, ok := DataSize(t); !ok {
			return bad("element type %d", t)
		}
	}
	if _, ok := ScalarType(g.Compute); !ok {
		return bad("compute type %d", g.Compute)
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

// Spans are the byte extents of A, B and C that g reads or writes (g must be valid).
func (g *Gemm) Spans() (a, b, c uint64) {
	ea, _ := DataSize(g.AType)
	eb, _ := DataSize(g.BType)
	ec, _ := DataSize(g.CType)
	ra, ca := g.shapeA()
	rb, cb := g.shapeB()
	if g.K == 0 {
		ra, rb = 0, 0 // op(A) and op(B) are not read
	}
	return Span(ra, ca, g.LdA, g.StrideA, g.Batch, ea), Span(rb, cb, g.LdB, g.StrideB, g.Batch, eb),
		Span(g.M, g.N, g.LdC, g.StrideC, g.Batch, ec)
}

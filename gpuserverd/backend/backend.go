// Package backend is the seam between gpuserverd's session workers and a GPU: the real one, the
// CUDA driver API loaded at run time (package cuda), or the simulated one for machines without a
// GPU (package sim, a test double). A worker process holds exactly one Context.
//
// Every error a backend returns is a Result (a CUDA driver status code) or wraps one, so the guest
// library can hand programs the same codes the real driver would.
package backend

import "fmt"

// Result is a CUDA driver API status code (CUresult); Success is 0.
type Result int32

// The codes the platform itself produces; a real backend passes the driver's codes through as they are.
const (
	Success           Result = 0
	ErrInvalidValue   Result = 1
	ErrOutOfMemory    Result = 2
	ErrNotInitialized Result = 3
	ErrDeinitialized  Result = 4
	ErrNoDevice       Result = 100
	ErrInvalidDevice  Result = 101
	ErrInvalidImage   Result = 200
	ErrInvalidContext Result = 201
	ErrInvalidHandle  Result = 400
	ErrNotFound       Result = 500
	ErrNotReady       Result = 600
	ErrIllegalAddress Result = 700
	ErrLaunchFailed   Result = 719
	// ErrHostAlreadyRegistered and ErrHostNotRegistered are cuMemHostRegister's and
	// cuMemHostUnregister's refusals.
	ErrHostAlreadyRegistered Result = 712
	ErrHostNotRegistered     Result = 713
	ErrNotPermitted          Result = 800
	ErrNotSupported          Result = 801
	ErrUnknown               Result = 999
	// ErrUnsupportedLimit is cuCtxSetLimit's and cuCtxGetLimit's refusal of a limit it does not know.
	ErrUnsupportedLimit Result = 215
)

func (r Result) Error() string { return fmt.Sprintf("CUDA error %d", int32(r)) }

// ResultOf extracts the CUDA code of err: Success for nil, ErrUnknown for a non-CUDA error.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var r Result
	if asResult(err, &r) {
		return r
	}
	return ErrUnknown
}

// Device describes one GPU as the driver sees it.
type Device struct {
	Ordinal     int
	Name        string
	UUID        string // "GPU-xxxxxxxx-..."
	TotalMemory uint64
	Major       int // compute capability
	Minor       int
	PCIBusID    string
}

// Handle is an opaque driver object id (stream, event, module, function) valid in one Context.
// 0 is the default stream (for streams) and never a valid object otherwise.
type Handle uint64

// Param is one kernel parameter's place in the packed parameter buffer.
type Param struct {
	Offset uint32
	Size   uint32
}

// LaunchConfig is a kernel launch.
type LaunchConfig struct {
	Function       Handle
	Grid, Block    [3]uint32
	SharedMemBytes uint32
	Stream         Handle
	// Params holds the parameter values packed per the function's ParamLayout.
	Params []byte
}

// Backend opens contexts on its devices.
type Backend interface {
	// Kind is "cuda" or "simulated".
	Kind() string
	DriverVersion() (int32, error)
	Devices() ([]Device, error)
	DeviceAttribute(ordinal int, attr int32) (int32, error)
	// NewContext creates a context on the device; the worker closes it when the session ends.
	NewContext(ordinal int) (Context, error)
}

// Context is one session's CUDA context. Methods are called from one goroutine at a time.
type Context interface {
	MemAlloc(bytes uint64) (uint64, error)
	MemFree(ptr uint64) error
	MemGetInfo() (free, total uint64, err error)

	// HostAlloc returns page-locked host memory the device can DMA from; staging buffers use it.
	HostAlloc(bytes int) ([]byte, error)
	HostFree(buf []byte) error
	// HostRegister page-locks memory the caller mapped (cuMemHostRegister), so the device DMAs
	// straight from and to it: the shared-memory arena a local guest's copies go through.
	HostRegister(buf []byte) error
	HostUnregister(buf []byte) error

	// Copies and memsets on stream (0: the default stream). An async call may return before the
	// copy ends; the buffer must stay untouched until the stream is synchronised.
	MemcpyHtoD(dst uint64, src []byte, stream Handle, async bool) error
	MemcpyDtoH(dst []byte, src uint64, stream Handle, async bool) error
	MemcpyDtoD(dst, src, bytes uint64, stream Handle, async bool) error
	// Memset writes count elements of elemSize (1, 2 or 4) bytes, each the low bytes of value.
	Memset(dst uint64, value uint32, elemSize int, count uint64, stream Handle, async bool) error

	ModuleLoadData(image []byte) (Handle, error)
	ModuleUnload(module Handle) error
	ModuleGetFunction(module Handle, name string) (Handle, error)
	ModuleGetGlobal(module Handle, name string) (ptr, bytes uint64, err error)
	// ParamLayout tells how to pack the function's parameters (cuFuncGetParamInfo on a real GPU).
	ParamLayout(function Handle) ([]Param, error)
	FuncGetAttribute(function Handle, attr int32) (int32, error)
	// FuncSetAttribute is cuFuncSetAttribute: chiefly the dynamic shared memory a function may
	// launch with past the 48 KiB default.
	FuncSetAttribute(function Handle, attr, value int32) error
	// OccupancyMaxActiveBlocks is cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags.
	OccupancyMaxActiveBlocks(function Handle, blockSize int32, dynamicShared uint64, flags uint32) (int32, error)
	LaunchKernel(cfg LaunchConfig) error

	StreamCreate(flags uint32) (Handle, error)
	StreamDestroy(stream Handle) error
	StreamSynchronize(stream Handle) error
	StreamQuery(stream Handle) error // nil when idle, ErrNotReady while work is pending
	StreamWaitEvent(stream, event Handle) error

	EventCreate(flags uint32) (Handle, error)
	EventDestroy(event Handle) error
	EventRecord(event, stream Handle) error
	EventSynchronize(event Handle) error
	EventQuery(event Handle) error
	EventElapsedTime(start, end Handle) (float32, error)

	// cuBLAS on this context (the library API remoted; see blas.go). Handles are ids like the
	// others'; each has a stream (0 until set) and a workspace in the context's memory.
	BlasCreate() (Handle, error)
	BlasDestroy(h Handle) error
	BlasSetStream(h, stream Handle) error
	BlasSetMathMode(h Handle, mode uint32) error
	// BlasSetWorkspace makes [ptr, ptr+bytes) of device memory the handle's workspace.
	BlasSetWorkspace(h Handle, ptr, bytes uint64) error
	// BlasGemm issues g on its handle's stream, like a kernel launch: errors of execution
	// surface at the next synchronisation.
	BlasGemm(g Gemm) error
	// BlasTrsm, BlasGetrfBatched and BlasGetrsBatched issue t on its handle's stream the same
	// way (see blassolve.go).
	BlasTrsm(t Trsm) error
	BlasGetrfBatched(g GetrfBatched) error
	BlasGetrsBatched(g GetrsBatched) error

	// cuBLASLt (see lt.go): LtCreate makes a cublasLtHandle_t, destroyed by BlasDestroy; the
	// cuBLASLt calls also take BlasCreate's handles, as NVIDIA's do. Descriptors, layouts and
	// preferences come whole with each call.
	LtCreate() (Handle, error)
	// LtHeuristic is cublasLtMatmulAlgoGetHeuristic: at most q.Requested results, best first.
	LtHeuristic(q LtQuery) ([]LtResult, error)
	// LtMatmul issues m on its stream, like a kernel launch.
	LtMatmul(m LtMatmul) error
	// LtGetAttribute is cublasLt<kind>GetAttribute on o as built from its attributes: the
	// value (size bytes at most; size 0 asks for the size only) and cuBLASLt's sizeWritten.
	LtGetAttribute(o LtObject, attr uint32, size uint64) (value []byte, written uint64, err error)

	Synchronize() error
	// SetLimit and Limit are cuCtxSetLimit and cuCtxGetLimit (limit: a CUlimit).
	SetLimit(limit int32, value uint64) error
	Limit(limit int32) (uint64, error)
	// SetCacheConfig and CacheConfig are cuCtxSetCacheConfig and cuCtxGetCacheConfig (a
	// CUfunc_cache: a preference the driver may not follow).
	SetCacheConfig(config int32) error
	CacheConfig() (int32, error)
	// Close destroys the context, freeing everything it holds.
	Close() error
}

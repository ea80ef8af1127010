package worker

import (
	"fmt"
	"math"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// blasWorkspace is the device memory the worker gives each cuBLAS handle as its workspace,
// charged to the session's quota like its own allocations (NVIDIA recommends 32 MiB on Hopper;
// cuBLAS would otherwise take a pool of its own that no quota sees).
const blasWorkspace = 32 << 20

// blasState is a device's cuBLAS and cuBLASLt handles, each with the workspace the worker
// allocated for it (0 for a cuBLASLt handle).
type blasState struct {
	own map[backend.Handle]uint64 // handle -> the worker's workspace allocation
}

// isWorkspace reports whether p is a workspace the worker allocated: the program cannot free it.
func (b *blasState) isWorkspace(p uint64) bool {
	for _, ws := range b.own {
		if ws != 0 && ws == p {
			return true
		}
	}
	return false
}

func isBlas(m wire.Message) bool {
	switch m.(type) {
	case *wire.BlasCreate, *wire.BlasDestroy, *wire.BlasSetStream, *wire.BlasSetMathMode,
		*wire.BlasSetWorkspace, *wire.BlasGemm, *wire.BlasTrsm, *wire.BlasGetrfBatched, *wire.BlasGetrsBatched:
		return true
	}
	return false
}

func blasReply(h backend.Handle, err error) *wire.BlasReply {
	r := &wire.BlasReply{Result: int32(backend.ResultOf(err)), Status: int32(backend.BlasStatusOf(err)), Handle: uint64(h)}
	if err != nil {
		r.Message = truncate(err.Error(), 1024)
	}
	return r
}

// blas serves one cuBLAS request on the current device.
func (s *Session) blas(d *device, m wire.Message) *wire.BlasReply {
	if d.blas.own == nil {
		d.blas = blasState{own: map[backend.Handle]uint64{}}
	}
	c := d.ctx
	switch m := m.(type) {
	case *wire.BlasCreate:
		h, err := s.blasCreate(d)
		return blasReply(h, err)
	case *wire.BlasDestroy:
		h := backend.Handle(m.Handle)
		if _, ok := d.blas.own[h]; !ok {
			return blasReply(0, noHandle(h))
		}
		err := c.BlasDestroy(h)
		if ws := d.blas.own[h]; ws != 0 { // 0: a cuBLASLt handle, which has none
			err = firstErr(err, s.free(d, ws))
		}
		delete(d.blas.own, h)
		return blasReply(0, err)
	case *wire.BlasSetStream:
		return blasReply(0, c.BlasSetStream(backend.Handle(m.Handle), backend.Handle(m.Stream)))
	case *wire.BlasSetMathMode:
		return blasReply(0, c.BlasSetMathMode(backend.Handle(m.Handle), m.Mode))
	case *wire.BlasSetWorkspace:
		return blasReply(0, s.blasSetWorkspace(d, m))
	case *wire.BlasGemm:
		return blasReply(0, c.BlasGemm(backend.Gemm{
			Handle: backend.Handle(m.Handle), Ex: m.Ex != 0, AType: m.Atype, BType: m.Btype, CType: m.Ctype,
			Compute: m.Compute, Algo: m.Algo, TransA: m.Transa, TransB: m.Transb,
			M: m.M, N: m.N, K: m.K, DevicePtrs: m.PointerMode == 1, Alpha: m.Alpha, Beta: m.Beta,
			A: m.A, LdA: m.Lda, StrideA: int64(m.StrideA), B: m.B, LdB: m.Ldb, StrideB: int64(m.StrideB),
			C: m.C, LdC: m.Ldc, StrideC: int64(m.StrideC), Batch: m.Batch,
		}))
	case *wire.BlasTrsm, *wire.BlasGetrfBatched, *wire.BlasGetrsBatched:
		return blasReply(0, s.blasSolve(d, m))
	}
	return blasReply(0, fmt.Errorf("not a cuBLAS request: %w", backend.ErrInvalidValue))
}

func noHandle(h backend.Handle) error {
	return &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLAS handle %d in this session", h)}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// blasCreate makes a handle with a workspace charged to the quota.
func (s *Session) blasCreate(d *device) (backend.Handle, error) {
	ws, err := s.alloc(d, blasWorkspace)
	if err != nil {
		return 0, &backend.BlasError{Op: "cublasCreate", Status: backend.BlasAllocFailed, Detail: "workspace: " + err.Error()}
	}
	h, err := d.ctx.BlasCreate()
	if err == nil {
		err = d.ctx.BlasSetWorkspace(h, ws, blasWorkspace)
		if err != nil {
			_ = d.ctx.BlasDestroy(h)
		}
	}
	if err != nil {
		_ = s.free(d, ws)
		return 0, err
	}
	d.blas.own[h] = ws
	return h, nil
}

// blasSetWorkspace switches a handle to the program's own device memory (a range inside one of
// the session's allocations), or back to the worker's with bytes 0.
func (s *Session) blasSetWorkspace(d *device, m *wire.BlasSetWorkspace) error {
	h := backend.Handle(m.Handle)
	own, ok := d.blas.own[h]
	if !ok {
		return noHandle(h)
	}
	if m.Bytes == 0 {
		return d.ctx.BlasSetWorkspace(h, own, blasWorkspace)
	}
	if !d.within(m.Ptr, m.Bytes) {
		return &backend.BlasError{Op: "cublasSetWorkspace", Status: backend.BlasInvalidValue,
			Detail: fmt.Sprintf("[%#x, +%d) is not inside one of the session's allocations", m.Ptr, m.Bytes)}
	}
	return d.ctx.BlasSetWorkspace(h, m.Ptr, m.Bytes)
}

// within reports whether [p, p+n) is the session's memory on d: inside one allocation, or
// covered by virtual-memory mappings that follow one another (PyTorch's expandable segments map a
// segment piece by piece, and a workspace may span several pieces).
func (d *device) within(p, n uint64) bool {
	for base, size := range d.allocs {
		if p >= base && p-base <= size && n <= size-(p-base) {
			return true
		}
	}
	if n > math.MaxUint64-p {
		return false
	}
	for at, end := p, p+n; ; {
		next, ok := d.fam.mappedThrough(at)
		if !ok {
			return false
		}
		if next >= end {
			return true
		}
		at = next
	}
}

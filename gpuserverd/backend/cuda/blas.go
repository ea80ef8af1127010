package cuda

/*
#include <stdlib.h>
#include "blas.h"
#include "lt.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// BlasLibraries are the cuBLAS libraries tried in order on a session's first handle;
// GPUSERVERD_CUBLAS names another (a toolkit's lib64 outside the loader's path).
var BlasLibraries = []string{"libcublas.so.13", "libcublas.so.12"}

// libLoad loads a vendor library once per process (a worker serves one session).
type libLoad struct {
	sync.Mutex
	done bool
	err  error
}

// load tries names in order (env, when set, names the only one) with open, a gc_*_open.
func (l *libLoad) load(what, env string, names []string, open func(name, err *C.char, n C.size_t) C.int) error {
	l.Lock()
	defer l.Unlock()
	if l.done {
		return l.err
	}
	l.done = true
	if p := os.Getenv(env); p != "" {
		names = []string{p}
	}
	var errs []error
	for _, n := range names {
		cn := C.CString(n)
		var buf [512]C.char
		rc := open(cn, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cn))
		if rc == 0 {
			return nil
		}
		errs = append(errs, errors.New(C.GoString(&buf[0])))
	}
	l.err = &backend.BlasError{Op: "load " + what, Status: backend.BlasNotInitialized, Detail: errors.Join(errs...).Error()}
	return l.err
}

var blasLoad libLoad

func loadBlas() error {
	return blasLoad.load("cuBLAS", "GPUSERVERD_CUBLAS", BlasLibraries, func(n, e *C.char, l C.size_t) C.int { return C.gc_blas_open(n, e, l) })
}

// blasHandle is a cuBLAS handle of this context, with what must be reapplied to it.
type blasHandle struct {
	ptr       C.cublasHandle_t
	stream    C.CUstream
	ptrMode   int
	workspace [2]uint64
	lt        bool // a cublasLtHandle_t (LtCreate's): cuBLAS calls refuse it
	// streamH and mathMode are what a restore sets again.
	streamH  backend.Handle
	mathMode uint32
}

func blasCheck(op string, st C.int) error {
	if st == 0 {
		return nil
	}
	return &backend.BlasError{Op: op, Status: backend.BlasStatus(st)}
}

func (c *Context) blasHandle(h backend.Handle) (*blasHandle, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	bh, ok := c.blas[h]
	if !ok || bh.lt {
		return nil, &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLAS handle %d", h)}
	}
	return bh, nil
}

// BlasCreate is cublasCreate in this context, loading cuBLAS on first use.
func (c *Context) BlasCreate() (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	if err := loadBlas(); err != nil {
		return 0, err
	}
	bh := &blasHandle{}
	if err := blasCheck("cublasCreate", C.gc_blas_create(c.ctx, &bh.ptr)); err != nil {
		return 0, err
	}
	if c.blas == nil {
		c.blas = map[backend.Handle]*blasHandle{}
	}
	c.next++
	c.blas[c.next] = bh
	return c.next, nil
}

// BlasDestroy is cublasDestroy (which waits for the handle's work), or cublasLtDestroy.
func (c *Context) BlasDestroy(h backend.Handle) error {
	if err := c.live(); err != nil {
		return err
	}
	bh, ok := c.blas[h]
	if !ok {
		return &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLAS handle %d", h)}
	}
	delete(c.blas, h)
	return destroyBlas(c.ctx, bh)
}

func destroyBlas(ctx C.CUcontext, bh *blasHandle) error {
	if bh.lt {
		return blasCheck("cublasLtDestroy", C.gc_lt_destroy(ctx, C.cublasLtHandle_t(bh.ptr)))
	}
	return blasCheck("cublasDestroy", C.gc_blas_destroy(ctx, bh.ptr))
}

// BlasSetStream is cublasSetStream. cuBLAS drops a user workspace when the stream changes, so
// the handle's is set again.
func (c *Context) BlasSetStream(h, stream backend.Handle) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	if err := blasCheck("cublasSetStream", C.gc_blas_set_stream(c.ctx, bh.ptr, s)); err != nil {
		return err
	}
	bh.stream, bh.streamH = s, stream
	if ws := bh.workspace; ws[1] > 0 {
		return blasCheck("cublasSetWorkspace", C.gc_blas_set_workspace(c.ctx, bh.ptr, C.CUdeviceptr(ws[0]), C.size_t(ws[1])))
	}
	return nil
}

func (c *Context) BlasSetMathMode(h backend.Handle, mode uint32) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	if err := blasCheck("cublasSetMathMode", C.gc_blas_set_math_mode(c.ctx, bh.ptr, C.int(mode))); err != nil {
		return err
	}
	bh.mathMode = mode
	return nil
}

func (c *Context) BlasSetWorkspace(h backend.Handle, ptr, bytes uint64) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	if err := blasCheck("cublasSetWorkspace", C.gc_blas_set_workspace(c.ctx, bh.ptr, C.CUdeviceptr(ptr), C.size_t(bytes))); err != nil {
		return err
	}
	bh.workspace = [2]uint64{ptr, bytes}
	return nil
}

// BlasGemm issues <t>gemm or <t>gemmStridedBatched on the handle's stream.
func (c *Context) BlasGemm(g backend.Gemm) error {
	bh, err := c.blasHandle(g.Handle)
	if err != nil {
		return err
	}
	if err := g.Validate(); err != nil {
		return err
	}
	mode, err := c.blasPointerMode(bh, g.DevicePtrs)
	if err != nil {
		return err
	}
	op := "cublasSgemm"
	switch {
	case g.Ex:
		op = "cublasGemmEx"
	case g.AType == backend.DataR64F:
		op = "cublasDgemm"
	}
	cg := C.struct_gc_gemm{
		ex: boolInt(g.Ex), atype: C.int(g.AType), btype: C.int(g.BType), ctype: C.int(g.CType),
		compute: C.int(g.Compute), algo: C.int(g.Algo), ta: C.int(g.TransA), tb: C.int(g.TransB),
		m: C.int(g.M), n: C.int(g.N), k: C.int(g.K), lda: C.int(g.LdA), ldb: C.int(g.LdB), ldc: C.int(g.LdC),
		batch: C.int(g.Batch), device_ptrs: C.int(mode), alpha: C.uint64_t(g.Alpha), beta: C.uint64_t(g.Beta),
		a: C.CUdeviceptr(g.A), b: C.CUdeviceptr(g.B), c: C.CUdeviceptr(g.C),
		sa: C.longlong(g.StrideA), sb: C.longlong(g.StrideB), sc: C.longlong(g.StrideC),
	}
	return blasCheck(op, C.gc_blas_gemm(c.ctx, bh.ptr, &cg))
}

// blasPointerMode puts the handle in device (1) or host (0) pointer mode for the next call.
func (c *Context) blasPointerMode(bh *blasHandle, device bool) (int, error) {
	mode := 0
	if device {
		mode = 1
	}
	if mode != bh.ptrMode {
		if err := blasCheck("cublasSetPointerMode", C.gc_blas_set_pointer_mode(c.ctx, bh.ptr, C.int(mode))); err != nil {
			return mode, err
		}
		bh.ptrMode = mode
	}
	return mode, nil
}

// BlasTrsm issues <t>trsm_v2 on the handle's stream.
func (c *Context) BlasTrsm(t backend.Trsm) error {
	bh, err := c.blasHandle(t.Handle)
	if err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	mode, err := c.blasPointerMode(bh, t.DevicePtrs)
	if err != nil {
		return err
	}
	ct := C.struct_gc_trsm{
		dbl: boolInt(t.Double), side: C.int(t.Side), uplo: C.int(t.Uplo), trans: C.int(t.Trans), diag: C.int(t.Diag),
		m: C.int(t.M), n: C.int(t.N), lda: C.int(t.LdA), ldb: C.int(t.LdB), device_ptrs: C.int(mode),
		alpha: C.uint64_t(t.Alpha), a: C.CUdeviceptr(t.A), b: C.CUdeviceptr(t.B),
	}
	return blasCheck("cublasTrsm", C.gc_blas_trsm(c.ctx, bh.ptr, &ct))
}

// BlasGetrfBatched issues <t>getrfBatched on the handle's stream.
func (c *Context) BlasGetrfBatched(g backend.GetrfBatched) error {
	bh, err := c.blasHandle(g.Handle)
	if err != nil {
		return err
	}
	if err := g.Validate(); err != nil {
		return err
	}
	return blasCheck("cublasGetrfBatched", C.gc_blas_getrf_batched(c.ctx, bh.ptr, boolInt(g.Double), C.int(g.N),
		C.CUdeviceptr(g.A), C.int(g.LdA), C.CUdeviceptr(g.Pivots), C.CUdeviceptr(g.Info), C.int(g.Batch)))
}

// BlasGetrsBatched issues <t>getrsBatched on the handle's stream; a bad argument cuBLAS reports
// through its host info is CUBLAS_STATUS_INVALID_VALUE.
func (c *Context) BlasGetrsBatched(g backend.GetrsBatched) error {
	bh, err := c.blasHandle(g.Handle)
	if err != nil {
		return err
	}
	if _, err := g.Validate(); err != nil {
		return err
	}
	var info C.int
	err = blasCheck("cublasGetrsBatched", C.gc_blas_getrs_batched(c.ctx, bh.ptr, boolInt(g.Double), C.int(g.Trans),
		C.int(g.N), C.int(g.NRHS), C.CUdeviceptr(g.A), C.int(g.LdA), C.CUdeviceptr(g.Pivots), C.CUdeviceptr(g.B),
		C.int(g.LdB), &info, C.int(g.Batch)))
	if err == nil && info != 0 {
		err = &backend.BlasError{Op: "cublasGetrsBatched", Status: backend.BlasInvalidValue, Detail: fmt.Sprintf("info %d", int(info))}
	}
	return err
}

// closeBlas destroys the context's handles before the context goes.
func (c *Context) closeBlas() []error {
	var errs []error
	for h, bh := range c.blas {
		errs = append(errs, destroyBlas(c.ctx, bh))
		delete(c.blas, h)
	}
	c.lt.drop()
	return errs
}

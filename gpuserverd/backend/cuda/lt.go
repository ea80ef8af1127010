package cuda

/*
#include <stdlib.h>
#include "blas.h"
#include "lt.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// LtLibraries are the cuBLASLt libraries tried in order, after cuBLAS has loaded (so its own
// cuBLASLt is the one found); GPUSERVERD_CUBLASLT names another.
var LtLibraries = []string{"libcublasLt.so.13", "libcublasLt.so.12"}

var ltLoad libLoad

// loadLt loads cuBLAS, then cuBLASLt, once per process.
func loadLt() error {
	if err := loadBlas(); err != nil {
		return err
	}
	return ltLoad.load("cuBLASLt", "GPUSERVERD_CUBLASLT", LtLibraries, func(n, e *C.char, l C.size_t) C.int { return C.gc_lt_open(n, e, l) })
}

// ltObjects caches NVIDIA's objects built from attribute lists: a program sends the same few
// descriptors again and again (one per layer shape), and building one costs a dozen calls.
type ltObjects struct {
	objs map[string]unsafe.Pointer // kind byte + encoded attributes -> NVIDIA's object
}

// maxLtObjects bounds the cache; past it, it starts over.
const maxLtObjects = 1024

func (o *ltObjects) drop() {
	for k, p := range o.objs {
		C.gc_lt_free(C.int(k[0]), p)
	}
	o.objs = nil
}

// object is NVIDIA's object for ob, built on first use.
func (o *ltObjects) object(ob backend.LtObject) (unsafe.Pointer, error) {
	key := string(append([]byte{byte(ob.Kind)}, ob.Encode()...))
	if p, ok := o.objs[key]; ok {
		return p, nil
	}
	if len(o.objs) >= maxLtObjects {
		o.drop()
	}
	if o.objs == nil {
		o.objs = map[string]unsafe.Pointer{}
	}
	op := "cuBLASLt " + ob.Kind.String()
	var p unsafe.Pointer
	var st C.int
	switch ob.Kind {
	case backend.LtMatmulDesc:
		st = C.gc_lt_new(0, &p, C.int(ob.Int(backend.LtDescCompute, 0)), C.int(ob.Int(backend.LtDescScale, 0)), 0, 0, 0)
	case backend.LtMatrixLayout:
		st = C.gc_lt_new(1, &p, C.int(ob.Uint(backend.LtLayoutType, 0)), 0, C.uint64_t(ob.Uint(backend.LtLayoutRows, 0)),
			C.uint64_t(ob.Uint(backend.LtLayoutCols, 0)), C.int64_t(ob.Int(backend.LtLayoutLd, 0)))
	default:
		st = C.gc_lt_new(2, &p, 0, 0, 0, 0, 0)
	}
	if err := blasCheck(op+" create", st); err != nil {
		return nil, err
	}
	for _, a := range ob.Attrs {
		if backend.LtCreateArg(ob.Kind, a.ID) {
			continue // given to the create call above
		}
		v := C.CBytes(a.Value)
		st := C.gc_lt_set(C.int(ob.Kind), p, C.int(a.ID), v, C.size_t(len(a.Value)))
		C.free(v)
		if err := blasCheck(fmt.Sprintf("%s attribute %d", op, a.ID), st); err != nil {
			C.gc_lt_free(C.int(ob.Kind), p)
			return nil, err
		}
	}
	o.objs[key] = p
	return p, nil
}

// ltHandle is a cuBLASLt handle of this context: one of LtCreate's, or a cuBLAS handle (NVIDIA's
// cublasHandle_t is a cublasLtHandle_t too).
func (c *Context) ltHandle(h backend.Handle) (C.cublasLtHandle_t, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	bh, ok := c.blas[h]
	if !ok {
		return nil, &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLASLt handle %d", h)}
	}
	if err := loadLt(); err != nil {
		return nil, err
	}
	return C.cublasLtHandle_t(bh.ptr), nil
}

// LtCreate is cublasLtCreate in this context.
func (c *Context) LtCreate() (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	if err := loadLt(); err != nil {
		return 0, err
	}
	var p C.cublasLtHandle_t
	if err := blasCheck("cublasLtCreate", C.gc_lt_create(c.ctx, &p)); err != nil {
		return 0, err
	}
	if c.blas == nil {
		c.blas = map[backend.Handle]*blasHandle{}
	}
	c.next++
	c.blas[c.next] = &blasHandle{ptr: C.cublasHandle_t(p), lt: true}
	return c.next, nil
}

func (c *Context) ltObjects(obs ...backend.LtObject) ([]unsafe.Pointer, error) {
	ps := make([]unsafe.Pointer, len(obs))
	for i, ob := range obs {
		p, err := c.lt.object(ob)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

// LtHeuristic is cublasLtMatmulAlgoGetHeuristic; at most backend.MaxLtResults come back.
func (c *Context) LtHeuristic(q backend.LtQuery) ([]backend.LtResult, error) {
	h, err := c.ltHandle(q.Handle)
	if err != nil {
		return nil, err
	}
	ps, err := c.ltObjects(q.Desc, q.A, q.B, q.C, q.D, q.Pref)
	if err != nil {
		return nil, err
	}
	n := min(max(q.Requested, 0), backend.MaxLtResults)
	var out [backend.MaxLtResults]C.struct_gc_lt_result
	var count C.int
	if err := blasCheck("cublasLtMatmulAlgoGetHeuristic", C.gc_lt_heuristic(c.ctx, h, ps[0], ps[1], ps[2], ps[3], ps[4], ps[5],
		C.int(n), &out[0], &count)); err != nil {
		return nil, err
	}
	rs := make([]backend.LtResult, 0, int(count))
	for i := 0; i < int(count) && i < n; i++ {
		r := backend.LtResult{Workspace: uint64(out[i].workspace), State: backend.BlasStatus(out[i].state), Waves: float32(out[i].waves)}
		for w := range r.Algo {
			r.Algo[w] = uint64(out[i].algo[w])
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// ltScalar is a scalar's address: its bytes copied to C memory, or its device address.
func ltScalar(v []byte, dev bool) (C.uintptr_t, func()) {
	if len(v) == 0 {
		return 0, func() {}
	}
	if dev {
		return C.uintptr_t(binary.LittleEndian.Uint64(v)), func() {}
	}
	p := C.calloc(16, 1) // the largest scalar, complex double
	copy(unsafe.Slice((*byte)(p), 16), v)
	return C.uintptr_t(uintptr(p)), func() { C.free(p) }
}

// LtMatmul is cublasLtMatmul on m's stream.
func (c *Context) LtMatmul(m backend.LtMatmul) error {
	h, err := c.ltHandle(m.Handle)
	if err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	s, err := c.stream(m.Stream)
	if err != nil {
		return err
	}
	ps, err := c.ltObjects(m.Desc, m.ADesc, m.BDesc, m.CDesc, m.DDesc)
	if err != nil {
		return err
	}
	alphaDev, betaDev, _, _ := backend.LtScalarPlaces(m.Desc.Int(backend.LtDescPointerMode, backend.LtPointerHost))
	alpha, freeA := ltScalar(m.Alpha, alphaDev)
	defer freeA()
	beta, freeB := ltScalar(m.Beta, betaDev)
	defer freeB()
	var algo *C.uint64_t
	if m.Algo != nil {
		a := (*[8]C.uint64_t)(C.calloc(8, 8))
		defer C.free(unsafe.Pointer(a))
		for i, w := range m.Algo {
			a[i] = C.uint64_t(w)
		}
		algo = &a[0]
	}
	return blasCheck("cublasLtMatmul", C.gc_lt_matmul(c.ctx, h, ps[0], alpha, C.CUdeviceptr(m.A), ps[1], C.CUdeviceptr(m.B), ps[2],
		beta, C.CUdeviceptr(m.C), ps[3], C.CUdeviceptr(m.D), ps[4], algo, C.CUdeviceptr(m.Workspace), C.size_t(m.WorkspaceSize), s))
}

// LtGetAttribute asks NVIDIA's cuBLASLt for an attribute of o (its default, where unset).
func (c *Context) LtGetAttribute(o backend.LtObject, attr uint32, size uint64) ([]byte, uint64, error) {
	if err := c.live(); err != nil {
		return nil, 0, err
	}
	if err := loadLt(); err != nil {
		return nil, 0, err
	}
	if _, ok := backend.LtAttrSize(o.Kind, attr); !ok {
		return nil, 0, &backend.BlasError{Op: "cuBLASLt get attribute", Status: backend.BlasInvalidValue, Detail: fmt.Sprintf("attribute %d of a %s", attr, o.Kind)}
	}
	p, err := c.lt.object(o)
	if err != nil {
		return nil, 0, err
	}
	buf := C.calloc(8, 1)
	defer C.free(buf)
	var written C.size_t
	n := min(size, 8)
	var dst unsafe.Pointer
	if n > 0 {
		dst = buf
	}
	if err := blasCheck("cuBLASLt get attribute", C.gc_lt_get(C.int(o.Kind), p, C.int(attr), dst, C.size_t(n), &written)); err != nil {
		return nil, 0, err
	}
	return C.GoBytes(buf, C.int(n)), uint64(written), nil
}

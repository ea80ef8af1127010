package cuda

/*
#include <stdlib.h>
#include "dnn.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// DnnLibraries are the cuDNN libraries tried in order on a session's first handle or descriptor;
// GPUSERVERD_CUDNN names another (a PyTorch wheel's nvidia/cudnn/lib, outside the loader's path).
var DnnLibraries = []string{"libcudnn.so.9"}

var dnnLoad struct {
	sync.Mutex
	done bool
	err  error
}

// loadDnn loads cuDNN once per process (a worker serves one session).
func loadDnn() error {
	dnnLoad.Lock()
	defer dnnLoad.Unlock()
	if dnnLoad.done {
		return dnnLoad.err
	}
	dnnLoad.done = true
	names := DnnLibraries
	if p := os.Getenv("GPUSERVERD_CUDNN"); p != "" {
		names = []string{p}
	}
	var errs []error
	for _, n := range names {
		cn := C.CString(n)
		var buf [512]C.char
		rc := C.gc_dnn_open(cn, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cn))
		if rc == 0 {
			return nil
		}
		errs = append(errs, errors.New(C.GoString(&buf[0])))
	}
	dnnLoad.err = &backend.DnnError{Op: "load cuDNN", Status: backend.DnnNotInitialized, Detail: errors.Join(errs...).Error()}
	return dnnLoad.err
}

// dnnObjects are a context's cuDNN handles and backend descriptors: NVIDIA's pointers by id.
type dnnObjects struct {
	handles map[backend.Handle]C.cudnnHandle_t
	descs   map[backend.Handle]C.cudnnBackendDescriptor_t
	// values are the by-value scalars of a variant pack (DnnTypeHostValues), which cuDNN reads
	// at cudnnBackendExecute: kept until the pack is destroyed or its pointers set again.
	values map[backend.Handle]unsafe.Pointer
}

func dnnCheck(op string, st C.int) error {
	if st == 0 {
		return nil
	}
	return &backend.DnnError{Op: op, Status: backend.DnnStatus(st)}
}

func (c *Context) dnnReady() error {
	if err := c.live(); err != nil {
		return err
	}
	if err := loadDnn(); err != nil {
		return err
	}
	if c.dnn.handles == nil {
		c.dnn = dnnObjects{handles: map[backend.Handle]C.cudnnHandle_t{}, descs: map[backend.Handle]C.cudnnBackendDescriptor_t{},
			values: map[backend.Handle]unsafe.Pointer{}}
	}
	return nil
}

func (c *Context) dnnHandle(h backend.Handle) (C.cudnnHandle_t, error) {
	if err := c.dnnReady(); err != nil {
		return nil, err
	}
	p, ok := c.dnn.handles[h]
	if !ok {
		return nil, &backend.DnnError{Op: "handle", Status: backend.DnnBadParam, Detail: fmt.Sprintf("no cuDNN handle %d", h)}
	}
	return p, nil
}

func (c *Context) dnnDesc(h backend.Handle) (C.cudnnBackendDescriptor_t, error) {
	if err := c.dnnReady(); err != nil {
		return nil, err
	}
	p, ok := c.dnn.descs[h]
	if !ok {
		return nil, &backend.DnnError{Op: "descriptor", Status: backend.DnnBadParam, Detail: fmt.Sprintf("no backend descriptor %d", h)}
	}
	return p, nil
}

// DnnCreate is cudnnCreate in this context, loading cuDNN on first use.
func (c *Context) DnnCreate() (backend.Handle, error) {
	if err := c.dnnReady(); err != nil {
		return 0, err
	}
	var p C.cudnnHandle_t
	if err := dnnCheck("cudnnCreate", C.gc_dnn_create(c.ctx, &p)); err != nil {
		return 0, err
	}
	c.next++
	c.dnn.handles[c.next] = p
	return c.next, nil
}

func (c *Context) DnnDestroy(h backend.Handle) error {
	p, err := c.dnnHandle(h)
	if err != nil {
		return err
	}
	delete(c.dnn.handles, h)
	return dnnCheck("cudnnDestroy", C.gc_dnn_destroy(c.ctx, p))
}

func (c *Context) DnnSetStream(h, stream backend.Handle) error {
	p, err := c.dnnHandle(h)
	if err != nil {
		return err
	}
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	return dnnCheck("cudnnSetStream", C.gc_dnn_set_stream(c.ctx, p, s))
}

func (c *Context) DnnDescCreate(kind uint32) (backend.Handle, error) {
	if err := c.dnnReady(); err != nil {
		return 0, err
	}
	var p C.cudnnBackendDescriptor_t
	if err := dnnCheck("cudnnBackendCreateDescriptor", C.gc_dnn_desc_create(c.ctx, C.int(kind), &p)); err != nil {
		return 0, err
	}
	c.next++
	c.dnn.descs[c.next] = p
	return c.next, nil
}

func (c *Context) DnnDescDestroy(h backend.Handle) error {
	p, err := c.dnnDesc(h)
	if err != nil {
		return err
	}
	delete(c.dnn.descs, h)
	c.dropValues(h)
	return dnnCheck("cudnnBackendDestroyDescriptor", C.gc_dnn_desc_destroy(c.ctx, p))
}

func (c *Context) dropValues(h backend.Handle) {
	if v, ok := c.dnn.values[h]; ok {
		C.free(v)
		delete(c.dnn.values, h)
	}
}

// dnnSetHostValues sets a DnnTypeHostValues attribute as cuDNN's VOID_PTR elements: device
// addresses as they came, by-value scalars as pointers to this process's copy of their bytes.
func (c *Context) dnnSetHostValues(h backend.Handle, d C.cudnnBackendDescriptor_t, a backend.DnnAttr) error {
	const op = "cudnnBackendSetAttribute"
	vals := C.calloc(C.size_t(a.Count+1), 8)
	ptrs := C.calloc(C.size_t(a.Count+1), 8)
	defer C.free(ptrs)
	out := unsafe.Slice((*uintptr)(ptrs), a.Count)
	for i := range out {
		n := binary.LittleEndian.Uint64(a.Elems[i*16:])
		v := a.Elems[i*16+8 : i*16+16]
		switch {
		case n == 0:
			out[i] = uintptr(binary.LittleEndian.Uint64(v))
		case n <= backend.DnnHostValueMax:
			slot := unsafe.Add(vals, i*8)
			copy(unsafe.Slice((*byte)(slot), n), v[:n])
			out[i] = uintptr(slot)
		default:
			C.free(vals)
			return &backend.DnnError{Op: op, Status: backend.DnnBadParam, Detail: fmt.Sprintf("element %d: %d value bytes (at most %d)", i, n, backend.DnnHostValueMax)}
		}
	}
	if err := dnnCheck(op, C.gc_dnn_set_attr(c.ctx, d, C.int(a.Name), C.int(backend.DnnTypeVoidPtr), C.int64_t(a.Count), ptrs)); err != nil {
		C.free(vals)
		return err
	}
	c.dropValues(h)
	c.dnn.values[h] = vals
	return nil
}

// realIDs rewrites the u64 id elements of a descriptor- or handle-typed attribute into NVIDIA's
// pointers, in C memory (cuDNN keeps pointers to descriptors, which Go memory must not hold).
func (c *Context) realIDs(typ uint32, ids []backend.Handle, buf unsafe.Pointer) error {
	out := unsafe.Slice((*uintptr)(buf), len(ids))
	for i, id := range ids {
		var p unsafe.Pointer
		var err error
		if typ == backend.DnnTypeHandle {
			var h C.cudnnHandle_t
			h, err = c.dnnHandle(id)
			p = unsafe.Pointer(h)
		} else {
			var d C.cudnnBackendDescriptor_t
			d, err = c.dnnDesc(id)
			p = unsafe.Pointer(d)
		}
		if err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = uintptr(p)
	}
	return nil
}

func (c *Context) DnnSetAttribute(h backend.Handle, a backend.DnnAttr) error {
	d, err := c.dnnDesc(h)
	if err != nil {
		return err
	}
	if a.Type == backend.DnnTypeHostValues {
		return c.dnnSetHostValues(h, d, a)
	}
	buf := C.malloc(C.size_t(len(a.Elems) + 1))
	defer C.free(buf)
	if a.Type == backend.DnnTypeDescriptor || a.Type == backend.DnnTypeHandle {
		if err := c.realIDs(a.Type, a.IDs(), buf); err != nil {
			return err
		}
	} else if len(a.Elems) > 0 {
		// Device addresses (VOID_PTR) and values travel as they lie in memory here.
		copy(unsafe.Slice((*byte)(buf), len(a.Elems)), a.Elems)
	}
	return dnnCheck("cudnnBackendSetAttribute", C.gc_dnn_set_attr(c.ctx, d, C.int(a.Name), C.int(a.Type), C.int64_t(a.Count), buf))
}

func (c *Context) DnnGetAttribute(h backend.Handle, name, typ uint32, requested int, in []backend.Handle) (int, []byte, error) {
	d, err := c.dnnDesc(h)
	if err != nil {
		return 0, nil, err
	}
	size, ok := backend.DnnElemSize(typ)
	if !ok || typ == backend.DnnTypeHandle || typ == backend.DnnTypeHostValues {
		return 0, nil, &backend.DnnError{Op: "cudnnBackendGetAttribute", Status: backend.DnnBadParamType, Detail: fmt.Sprintf("type %d", typ)}
	}
	buf := C.malloc(C.size_t(requested*size + 1))
	defer C.free(buf)
	if typ == backend.DnnTypeDescriptor {
		if err := c.realIDs(typ, in, buf); err != nil {
			return 0, nil, err
		}
	}
	var arr unsafe.Pointer
	if requested > 0 {
		arr = buf
	}
	var n C.int64_t
	if err := dnnCheck("cudnnBackendGetAttribute", C.gc_dnn_get_attr(c.ctx, d, C.int(name), C.int(typ), C.int64_t(requested), &n, arr)); err != nil {
		return 0, nil, err
	}
	if typ == backend.DnnTypeDescriptor {
		return int(n), nil, nil
	}
	got := min(int(n), requested)
	return int(n), C.GoBytes(buf, C.int(got*size)), nil
}

func (c *Context) DnnFinalize(h backend.Handle) error {
	d, err := c.dnnDesc(h)
	if err != nil {
		return err
	}
	return dnnCheck("cudnnBackendFinalize", C.gc_dnn_finalize(c.ctx, d))
}

// DnnExecute is cudnnBackendExecute: it queues the plan's kernels on the handle's stream.
func (c *Context) DnnExecute(h, plan, pack backend.Handle) error {
	hp, err := c.dnnHandle(h)
	if err != nil {
		return err
	}
	pp, err := c.dnnDesc(plan)
	if err != nil {
		return err
	}
	vp, err := c.dnnDesc(pack)
	if err != nil {
		return err
	}
	return dnnCheck("cudnnBackendExecute", C.gc_dnn_execute(c.ctx, hp, pp, vp))
}

// DnnLegacy makes NVIDIA's legacy descriptors from the call's words, runs it, and frees them.
func (c *Context) DnnLegacy(call backend.DnnLegacyCall) (backend.DnnLegacyResult, error) {
	var r backend.DnnLegacyResult
	var hp C.cudnnHandle_t
	if call.Op != backend.DnnOpDropoutStatesSize || call.Handle != 0 {
		var err error
		if hp, err = c.dnnHandle(call.Handle); err != nil {
			return r, err
		}
	} else if err := c.dnnReady(); err != nil {
		return r, err
	}
	if len(call.Descs) > 8 || len(call.Args) > 32 {
		return r, &backend.DnnError{Op: "cudnn legacy call", Status: backend.DnnBadParam, Detail: "too many descriptors or arguments"}
	}
	words := C.malloc(C.size_t(len(call.Descs)*backend.DnnDescSize + len(call.Args)*8 + 1))
	defer C.free(words)
	b := unsafe.Slice((*byte)(words), len(call.Descs)*backend.DnnDescSize+len(call.Args)*8)
	for i, d := range call.Descs {
		for j, v := range d {
			binary.LittleEndian.PutUint32(b[i*backend.DnnDescSize+4*j:], uint32(v))
		}
	}
	argOff := len(call.Descs) * backend.DnnDescSize
	for i, v := range call.Args {
		binary.LittleEndian.PutUint64(b[argOff+8*i:], v)
	}
	var value C.uint64_t
	var data [16]C.uint64_t
	st := C.gc_dnn_legacy(c.ctx, hp, C.int(call.Op), (*C.int32_t)(words), C.int(len(call.Descs)),
		(*C.uint64_t)(unsafe.Add(words, argOff)), C.int(len(call.Args)), &value, &data[0])
	if err := dnnCheck(fmt.Sprintf("cudnn legacy op %d", call.Op), st); err != nil {
		return r, err
	}
	r.Value = uint64(value)
	for i, v := range data {
		r.Data[i] = uint64(v)
	}
	return r, nil
}

// closeDnn destroys the context's descriptors and handles before the context goes.
func (c *Context) closeDnn() []error {
	var errs []error
	for h, p := range c.dnn.descs {
		errs = append(errs, dnnCheck("cudnnBackendDestroyDescriptor", C.gc_dnn_desc_destroy(c.ctx, p)))
		delete(c.dnn.descs, h)
		c.dropValues(h)
	}
	for h, p := range c.dnn.handles {
		errs = append(errs, dnnCheck("cudnnDestroy", C.gc_dnn_destroy(c.ctx, p)))
		delete(c.dnn.handles, h)
	}
	return errs
}

var _ backend.DnnContext = (*Context)(nil)

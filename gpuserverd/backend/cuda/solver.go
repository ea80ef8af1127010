package cuda

/*
#include <stdlib.h>
#include <string.h>
#include "solver.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// SolverLibraries are the cuSOLVER libraries tried in order on a session's first cuSOLVER call;
// GPUSERVERD_CUSOLVER names another (a PyTorch wheel's nvidia/cu13/lib, outside the loader's path).
var SolverLibraries = []string{"libcusolver.so.12", "libcusolver.so.11"}

var solverLoad libLoad

func loadSolver() error {
	err := solverLoad.load("cuSOLVER", "GPUSERVERD_CUSOLVER", SolverLibraries, func(n, e *C.char, l C.size_t) C.int { return C.gc_solver_open(n, e, l) })
	if err != nil {
		return &backend.SolverError{Op: "load cuSOLVER", Status: backend.SolverNotInitialized, Detail: err.Error()}
	}
	return nil
}

// solverObject is one of NVIDIA's cuSOLVER objects (a handle, params, an info) of this context.
type solverObject struct {
	kind uint8   // backend.SolverObj*
	ptr  uintptr // NVIDIA's pointer (C memory, which Go never moves or frees)
}

// solverDestroyers are the functions that destroy each kind of object, by name.
var solverDestroyers = map[uint8]string{
	backend.SolverObjHandle: "cusolverDnDestroy", backend.SolverObjParams: "cusolverDnDestroyParams",
	backend.SolverObjSyevj: "cusolverDnDestroySyevjInfo", backend.SolverObjGesvdj: "cusolverDnDestroyGesvdjInfo",
}

func solverCheck(op string, st C.int) error {
	if st == 0 {
		return nil
	}
	return &backend.SolverError{Op: op, Status: backend.SolverStatus(st)}
}

func solverBad(op string, st backend.SolverStatus, f string, a ...any) error {
	return &backend.SolverError{Op: op, Status: st, Detail: fmt.Sprintf(f, a...)}
}

// SolverCall runs f with NVIDIA's cuSOLVER: object ids become NVIDIA's pointers, a stream id the
// stream, outputs and host scratch point into C memory of this process (what the call writes
// there goes back in the reply, or nowhere for scratch).
func (c *Context) SolverCall(f backend.SolverFunc, args []uint64) ([]uint64, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	if len(args) != len(f.Args) {
		return nil, solverBad(f.Name, backend.SolverInvalidValue, "%d words for %d parameters", len(args), len(f.Args))
	}
	if err := loadSolver(); err != nil {
		return nil, err
	}
	n := len(args)
	// words, then one 8-byte slot per output word, in one C allocation.
	mem := C.calloc(C.size_t(n+backend.SolverMaxOut+1), 8)
	defer C.free(mem)
	words := unsafe.Slice((*uint64)(mem), n)
	slots := unsafe.Add(mem, 8*n)
	used := 0
	slot := func(k int) (unsafe.Pointer, error) {
		if used+k > backend.SolverMaxOut {
			return nil, solverBad(f.Name, backend.SolverInvalidValue, "more than %d output words", backend.SolverMaxOut)
		}
		p := unsafe.Add(slots, 8*used)
		used += k
		return p, nil
	}
	for i, a := range f.Args {
		w := args[i]
		switch a.Kind {
		case backend.SolverObject:
			if w == 0 && a.Nullable {
				break // NULL params: NVIDIA's default algorithms
			}
			o, ok := c.solver[backend.Handle(w)]
			if !ok || o.kind != a.Obj {
				return nil, solverBad(f.Name, backend.SolverNotInitialized, "parameter %d: no object %d of kind %d", i, w, a.Obj)
			}
			w = uint64(o.ptr)
		case backend.SolverStream:
			s, err := c.stream(backend.Handle(w))
			if err != nil {
				return nil, err
			}
			w = uint64(uintptr(unsafe.Pointer(s)))
		case backend.SolverNew, backend.SolverOut, backend.SolverOutArray:
			if w == 0 {
				continue
			}
			k := 1
			if a.Kind == backend.SolverOutArray {
				if args[a.Ref] > backend.SolverMaxOut {
					return nil, solverBad(f.Name, backend.SolverInvalidValue, "a host array of %d elements", int64(args[a.Ref]))
				}
				k = int(args[a.Ref])
			}
			p, err := slot(k)
			if err != nil {
				return nil, err
			}
			w = uint64(uintptr(p))
		case backend.SolverHostWork:
			size := args[a.Ref]
			if w == 0 || size == 0 {
				w = 0
				continue
			}
			p, err := c.solverScratch(f.Name, size)
			if err != nil {
				return nil, err
			}
			w = uint64(uintptr(p))
		}
		words[i] = w
	}
	err := solverCheck(f.Name, C.gc_solver_call(c.ctx, C.uint32_t(f.ID), (*C.uint64_t)(mem)))
	if f.Destroy {
		delete(c.solver, backend.Handle(args[0]))
	}
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, used)
	for i := 0; i < used; i++ {
		out = append(out, binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(slots, 8*i)), 8)))
	}
	// A new object's slot holds NVIDIA's pointer: it becomes an id of this context.
	for _, o := range f.Outputs(args) {
		switch a := f.Args[o.Param]; a.Kind {
		case backend.SolverNew:
			if c.solver == nil {
				c.solver = map[backend.Handle]solverObject{}
			}
			c.next++
			c.solver[c.next] = solverObject{kind: a.Obj, ptr: uintptr(out[o.First])}
			out[o.First] = uint64(c.next)
		case backend.SolverOut:
			out[o.First] &= 1<<(8*a.Size) - 1 // only the bytes the call writes
		}
	}
	return out, nil
}

// solverScratch is host scratch of at least size bytes for a call's bufferOnHost. It only grows,
// and a smaller one it replaces is kept until the context closes: cuSOLVER may still be working
// in it on a stream after the call that named it returned, so no scratch is freed while work
// may be queued.
func (c *Context) solverScratch(op string, size uint64) (unsafe.Pointer, error) {
	if size > backend.SolverMaxHostWork {
		return nil, solverBad(op, backend.SolverInvalidValue, "%d bytes of host scratch (at most %d)", size, backend.SolverMaxHostWork)
	}
	if size <= c.scratch.size {
		return c.scratch.ptr, nil
	}
	p := C.malloc(C.size_t(size))
	if p == nil {
		return nil, solverBad(op, backend.SolverAllocFailed, "%d bytes of host scratch", size)
	}
	if c.scratch.ptr != nil {
		c.scratch.retired = append(c.scratch.retired, c.scratch.ptr)
	}
	c.scratch.ptr, c.scratch.size = p, size
	return p, nil
}

// hostScratch is a context's host scratch for cuSOLVER (solverScratch).
type hostScratch struct {
	ptr     unsafe.Pointer
	size    uint64
	retired []unsafe.Pointer
}

// closeSolver destroys the context's cuSOLVER objects before the context goes.
func (c *Context) closeSolver() []error {
	var errs []error
	ids := map[string]uint32{}
	for id, f := range backend.SolverFuncs {
		ids[f.Name] = id
	}
	words := (*C.uint64_t)(C.calloc(1, 8))
	defer C.free(unsafe.Pointer(words))
	for h, o := range c.solver {
		name := solverDestroyers[o.kind]
		*words = C.uint64_t(o.ptr)
		errs = append(errs, solverCheck(name, C.gc_solver_call(c.ctx, C.uint32_t(ids[name]), words)))
		delete(c.solver, h)
	}
	if c.scratch.ptr != nil { // no queued work may still use scratch when it is freed
		errs = append(errs, check("cuCtxSynchronize", C.gc_ctx_synchronize(c.ctx)))
	}
	for _, p := range append(c.scratch.retired, c.scratch.ptr) {
		C.free(p)
	}
	c.scratch = hostScratch{}
	return errs
}

var _ backend.SolverContext = (*Context)(nil)

package cuda

/*
#include <stdlib.h>
#include "libcall.h"
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

// mathLibs are NVIDIA's libraries behind LibCall: the names tried, the variable naming another
// (a PyTorch wheel's nvidia/cu13/lib, outside the loader's path) and the marker of gpucloud's own
// guest library, which is refused.
var mathLibs = [6]struct {
	names       []string
	env, marker string
	sync.Mutex  // guards the rest
	done        bool
	err         error
}{
	{names: []string{"libcusparse.so.12"}, env: "GPUSERVERD_CUSPARSE", marker: "gpucloud_cusparse_guest"},
	{names: []string{"libcufft.so.12"}, env: "GPUSERVERD_CUFFT", marker: "gpucloud_cufft_guest"},
	{names: []string{"libcurand.so.10"}, env: "GPUSERVERD_CURAND", marker: "gpucloud_curand_guest"},
	{names: []string{"libcusolver.so.12", "libcusolver.so.11"}, env: "GPUSERVERD_CUSOLVER", marker: "gpucloud_cusolver_guest"},
	{names: []string{"libnvjpeg.so.13"}, env: "GPUSERVERD_NVJPEG", marker: "gpucloud_nvjpeg_guest"},
	// NPP: eleven libraries (libcall.c's list), GPUSERVERD_NPP the folder holding them.
	{env: "GPUSERVERD_NPP", marker: "gpucloud_npp_guest"},
}

// loadLib opens lib's library once per process (a worker serves one session).
func loadLib(lib backend.Lib, f *backend.LibFunc) error {
	l := &mathLibs[lib]
	l.Lock()
	defer l.Unlock()
	if l.done {
		return l.err
	}
	l.done = true
	if lib == backend.LibNpp {
		return loadNpp(f, l.env, l.marker, &l.err)
	}
	names := l.names
	if p := os.Getenv(l.env); p != "" {
		names = []string{p}
	}
	var errs []error
	cm := C.CString(l.marker)
	defer C.free(unsafe.Pointer(cm))
	for _, n := range names {
		cn := C.CString(n)
		var buf [512]C.char
		rc := C.gc_lib_open(C.int(lib), cn, cm, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cn))
		if rc == 0 {
			return nil
		}
		errs = append(errs, errors.New(C.GoString(&buf[0])))
	}
	l.err = backend.LibNotSupported(f, "load %s: %v", lib, errors.Join(errs...))
	return l.err
}

// loadNpp opens NVIDIA's NPP libraries from the folder $env names (else the loader's path).
func loadNpp(f *backend.LibFunc, env, marker string, errp *error) error {
	var dir *C.char
	if d := os.Getenv(env); d != "" {
		dir = C.CString(d)
		defer C.free(unsafe.Pointer(dir))
	}
	cm := C.CString(marker)
	defer C.free(unsafe.Pointer(cm))
	var buf [512]C.char
	if C.gc_npp_open(dir, cm, &buf[0], C.size_t(len(buf))) != 0 {
		*errp = backend.LibNotSupported(f, "load NPP: %s", C.GoString(&buf[0]))
	}
	return *errp
}

// nppSyms caches NVIDIA's NPP functions by function id (a worker serves one session).
var nppSyms sync.Map

func nppSym(f *backend.LibFunc) (unsafe.Pointer, error) {
	if p, ok := nppSyms.Load(f.ID); ok {
		return p.(unsafe.Pointer), nil
	}
	cn := C.CString(f.Name)
	defer C.free(unsafe.Pointer(cn))
	p := C.gc_lib_sym(C.int(f.Lib), cn)
	if p == nil {
		return nil, backend.LibNotSupported(f, "NVIDIA's NPP has no %s", f.Name)
	}
	nppSyms.Store(f.ID, p)
	return p, nil
}

// nppContext makes an NppStreamContext's bytes (in C memory) NVIDIA's: the context's stream of the
// handle in its first 8 bytes, and this context's device as nCudaDeviceId.
func (c *Context) nppContext(f *backend.LibFunc, b unsafe.Pointer) error {
	bs := unsafe.Slice((*byte)(b), 16)
	s, err := c.stream(backend.Handle(binary.LittleEndian.Uint64(bs)))
	if err != nil {
		return fmt.Errorf("%s: stream context: %w", f.Name, err)
	}
	binary.LittleEndian.PutUint64(bs, uint64(uintptr(unsafe.Pointer(s))))
	binary.LittleEndian.PutUint32(bs[8:], uint32(c.dev))
	return nil
}

// LibCall runs a remoted cuSPARSE, cuFFT, cuRAND, cuSOLVER or nvJPEG function in this context: streams
// become NVIDIA's, host inputs, host scalars and staged host arrays are copied into C memory for
// the call (the written arrays back into call.Host after it), host scratch is the context's,
// outputs start at their value before the call. Object ids are NVIDIA's own handles and pointers,
// which the worker has checked are this session's.
func (c *Context) LibCall(call backend.LibCall) ([]uint64, error) {
	f := call.Func
	if err := c.live(); err != nil {
		return nil, err
	}
	if err := loadLib(f.Lib, f); err != nil {
		return nil, err
	}
	n := len(f.Params)
	mem := C.calloc(C.size_t(3*n+1), 8) // words, host pointers, outputs
	defer C.free(mem)
	words := unsafe.Slice((*uint64)(mem), 3*n+1)
	a, o := words[:n], words[2*n:3*n]
	p := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(mem, 8*n)), n)
	mode := -1
	for i, prm := range f.Params {
		w := call.Words[i]
		a[i] = w
		switch prm.Kind {
		case backend.PStream:
			s, err := c.stream(backend.Handle(w))
			if err != nil {
				return nil, err
			}
			a[i] = uint64(uintptr(unsafe.Pointer(s)))
		case backend.POut:
			o[i] = w
		case backend.PNull:
			a[i] = 0 // the worker refused any other
		case backend.PHost, backend.PStaged:
			if len(call.Host[i]) > 0 {
				p[i] = C.CBytes(call.Host[i])
				defer C.free(p[i])
			}
		case backend.PByValue, backend.PStreamCtx: // the worker checked their length
			p[i] = C.CBytes(call.Host[i])
			defer C.free(p[i])
			if prm.Kind == backend.PStreamCtx {
				if err := c.nppContext(f, p[i]); err != nil {
					return nil, err
				}
			}
		case backend.PHostWork:
			size := call.Scratch // the largest host workspace the library reported
			if prm.LenParam >= 0 {
				size = call.Words[prm.LenParam]
			}
			if w != 0 && size != 0 {
				buf, err := c.hostScratch(f, size)
				if err != nil {
					return nil, err
				}
				p[i] = buf
			}
		case backend.PScalar:
			if w&backend.ScalarHostBit != 0 {
				buf := C.calloc(1, backend.MaxScalar)
				copy(unsafe.Slice((*byte)(buf), backend.MaxScalar), call.Host[i])
				p[i] = buf
				defer C.free(buf)
				mode = 0 // CUSPARSE_POINTER_MODE_HOST
			} else {
				p[i] = C.gc_addr(C.uint64_t(w)) // a device address NVIDIA's library reads on the GPU
				mode = 1
			}
		}
	}
	var handle unsafe.Pointer
	if f.Handle >= 0 && mode >= 0 {
		handle = C.gc_addr(C.uint64_t(call.Words[f.Handle])) // NVIDIA's cusparseHandle_t
	} else {
		mode = -1
	}
	var st C.int
	if f.Lib == backend.LibNpp {
		fp, err := nppSym(f)
		if err != nil {
			return nil, err
		}
		st = C.gc_npp_call(c.ctx, C.int(f.Sig), fp, (*C.uint64_t)(unsafe.Pointer(&a[0])),
			(*unsafe.Pointer)(unsafe.Pointer(&p[0])), (*C.uint64_t)(unsafe.Pointer(&o[0])))
	} else {
		st = C.gc_lib_call(c.ctx, C.int(f.Lib), C.int(f.ID), handle, C.int(mode), (*C.uint64_t)(unsafe.Pointer(&a[0])),
			(*unsafe.Pointer)(unsafe.Pointer(&p[0])), (*C.uint64_t)(unsafe.Pointer(&o[0])))
	}
	switch st {
	case 0:
	case C.GC_LIB_MISSING:
		return nil, backend.LibNotSupported(f, "NVIDIA's %s has no %s", f.Lib, f.Name)
	case C.GC_LIB_UNBOUND:
		return nil, fmt.Errorf("%s: binding the context: %w", f.Name, backend.ErrInvalidContext)
	default:
		return nil, &backend.LibError{Lib: f.Lib, Op: f.Name, Status: int32(st)}
	}
	var outs []uint64
	for i, prm := range f.Params {
		switch {
		case prm.Kind == backend.POut || prm.Kind == backend.PNew:
			outs = append(outs, o[i])
		case prm.Kind == backend.PStaged && prm.Written && p[i] != nil:
			copy(call.Host[i], unsafe.Slice((*byte)(p[i]), len(call.Host[i])))
		}
	}
	return outs, nil
}

// hostScratch is host scratch of at least size bytes for a call's bufferOnHost (cuSOLVER's 64-bit
// API). It only grows, and a smaller one it replaces is kept until the context closes: cuSOLVER
// may still be working in it on a stream after the call that named it returned, so no scratch is
// freed while work may be queued.
func (c *Context) hostScratch(f *backend.LibFunc, size uint64) (unsafe.Pointer, error) {
	if size > backend.MaxHostWork {
		return nil, backend.LibInvalid(f, "%d bytes of host scratch (at most %d)", size, backend.MaxHostWork)
	}
	if size <= c.scratch.size {
		return c.scratch.ptr, nil
	}
	p := C.malloc(C.size_t(size))
	if p == nil {
		return nil, &backend.LibError{Lib: f.Lib, Op: f.Name, Status: backend.LibStatusOf(f.Lib, backend.ErrOutOfMemory),
			Detail: fmt.Sprintf("%d bytes of host scratch", size)}
	}
	if c.scratch.ptr != nil {
		c.scratch.retired = append(c.scratch.retired, c.scratch.ptr)
	}
	c.scratch.ptr, c.scratch.size = p, size
	return p, nil
}

// hostScratch is a context's host scratch for the math libraries (hostScratch).
type hostScratch struct {
	ptr     unsafe.Pointer
	size    uint64
	retired []unsafe.Pointer
}

// closeScratch frees the context's host scratch once no queued work may still use it.
func (c *Context) closeScratch() []error {
	if c.scratch.ptr == nil {
		return nil
	}
	err := check("cuCtxSynchronize", C.gc_ctx_synchronize(c.ctx))
	for _, p := range append(c.scratch.retired, c.scratch.ptr) {
		C.free(p)
	}
	c.scratch = hostScratch{}
	return []error{err}
}

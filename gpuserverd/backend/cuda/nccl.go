package cuda

/*
#include <stdlib.h>
#include "nccl.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// NCCL on the real backend (issue 19): the worker's clique of contexts becomes one
// ncclCommInitAll and each collective one NCCL group over the ranks' streams. Written without a
// multi-GPU machine: loading is tested with fake libraries, the calls have NOT run on GPUs (see
// docs/multi-gpu.md). NCCL binds a device's primary context, so this serves sessions whose
// contexts are primary contexts (the backend's choice where the driver allows; see NewContext).

// NcclLibraries are tried in order; GPUSERVERD_NCCL names another.
var NcclLibraries = []string{"libnccl.so.2"}

var ncclLoad libLoad

var _ backend.Collectives = (*Backend)(nil)

func loadNccl() error {
	return ncclLoad.load("NCCL", "GPUSERVERD_NCCL", NcclLibraries, func(n, e *C.char, l C.size_t) C.int { return C.gc_nccl_open(n, e, l) })
}

type clique struct {
	ctxs  []*Context
	comms []unsafe.Pointer // C memory: NCCL's communicators, rank order
}

// CommInitAll makes one NCCL communicator per context, rank i on ctxs[i]'s device.
func (b *Backend) CommInitAll(ctxs []backend.Context) (backend.Clique, error) {
	if err := loadNccl(); err != nil {
		return nil, err
	}
	cl := &clique{}
	devs := make([]C.int, len(ctxs))
	for i, c := range ctxs {
		cc, ok := c.(*Context)
		if !ok || cc.closed {
			return nil, fmt.Errorf("nccl: rank %d's context is not a live CUDA context: %w", i, backend.ErrInvalidContext)
		}
		if !cc.primary {
			return nil, fmt.Errorf("nccl: rank %d's context is not its device's primary context: %w", i, backend.ErrNotSupported)
		}
		cl.ctxs = append(cl.ctxs, cc)
		devs[i] = C.int(cc.dev)
	}
	comms := (*[1 << 10]unsafe.Pointer)(C.calloc(C.size_t(len(ctxs)), C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	if rc := C.gc_nccl_init_all(&comms[0], C.int(len(ctxs)), &devs[0]); rc != 0 {
		C.free(unsafe.Pointer(comms))
		return nil, ncclError("ncclCommInitAll", rc)
	}
	cl.comms = comms[:len(ctxs):len(ctxs)]
	return cl, nil
}

func ncclError(op string, rc C.int) error {
	return fmt.Errorf("%s: %s (ncclResult %d): %w", op, C.GoString(C.gc_nccl_error_string(rc)), int(rc), backend.ErrUnknown)
}

// Run runs c as one NCCL group over every rank's part.
func (cl *clique) Run(c backend.Collective) error {
	n := len(cl.ctxs)
	if len(c.Parts) != n {
		return fmt.Errorf("nccl: %d parts for %d ranks: %w", len(c.Parts), n, backend.ErrInvalidValue)
	}
	// C memory: cgo may not pass Go memory holding C pointers (contexts, streams).
	mem := C.calloc(C.size_t(n), 32)
	defer C.free(mem)
	words := (*[1 << 12]uint64)(mem)[: 4*n : 4*n]
	ctxs := (*[1 << 10]C.CUcontext)(unsafe.Pointer(&words[0]))[:n:n]
	streams := (*[1 << 10]C.CUstream)(unsafe.Pointer(&words[n]))[:n:n]
	send, recv := words[2*n:3*n], words[3*n:4*n]
	for i, p := range c.Parts {
		s, err := cl.ctxs[i].stream(p.Stream)
		if err != nil {
			return fmt.Errorf("nccl: rank %d's stream: %w", i, err)
		}
		ctxs[i], streams[i], send[i], recv[i] = cl.ctxs[i].ctx, s, p.Send, p.Recv
	}
	rc := C.gc_nccl_run(C.int(c.Kind), C.int(n), &cl.comms[0], &ctxs[0], &streams[0], (*C.uint64_t)(&send[0]),
		(*C.uint64_t)(&recv[0]), C.size_t(c.Count), C.int(c.Datatype), C.int(c.Op), C.int(c.Root))
	if rc != 0 {
		return ncclError("nccl collective", rc)
	}
	return nil
}

func (cl *clique) Close() error {
	var first error
	for i, c := range cl.comms {
		if rc := C.gc_nccl_destroy(c); rc != 0 && first == nil {
			first = ncclError(fmt.Sprintf("ncclCommDestroy (rank %d)", i), rc)
		}
	}
	C.free(unsafe.Pointer(&cl.comms[0]))
	cl.comms = nil
	return first
}

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

// NCCL on the real backend (issue 19): each communicator a session makes is one
// ncclCommInitRank in its worker, on the rank's device, as a native process's would be; ranks in
// other workers (the instance's other sessions) join through the unique id's bytes, which never
// leave the server. Collectives go to NVIDIA's NCCL on the rank's stream without waiting, so
// NCCL's own transports (NVLink, PCIe P2P, shared memory between the workers) carry the data.
// NCCL takes the current device's primary context, so the session's context must be it.

// NcclLibraries are tried in order; GPUSERVERD_NCCL names another.
var NcclLibraries = []string{"libnccl.so.2"}

var ncclLoad libLoad

var (
	_ backend.Collectives = (*Backend)(nil)
	_ backend.PeerCopier  = (*Context)(nil)
)

func loadNccl() error {
	return ncclLoad.load("NCCL", "GPUSERVERD_NCCL", NcclLibraries, func(n, e *C.char, l C.size_t) C.int { return C.gc_nccl_open(n, e, l) })
}

func ncclError(op string, rc C.int) error {
	return fmt.Errorf("%s: %s (ncclResult %d): %w", op, C.GoString(C.gc_nccl_error_string(rc)), int(rc), backend.ErrUnknown)
}

// NcclUniqueID is ncclGetUniqueId's 128 bytes (the bootstrap root's address, in this process).
func (b *Backend) NcclUniqueID() ([]byte, error) {
	if err := loadNccl(); err != nil {
		return nil, err
	}
	id := make([]byte, C.GC_NCCL_ID_BYTES)
	if rc := C.gc_nccl_unique_id((*C.uchar)(unsafe.Pointer(&id[0]))); rc != 0 {
		return nil, ncclError("ncclGetUniqueId", rc)
	}
	return id, nil
}

type ncclComm struct {
	ctx  *Context
	comm unsafe.Pointer // NCCL's ncclComm_t
}

// CommInitRank is ncclCommInitRank in ctx.
func (b *Backend) CommInitRank(c backend.Context, id []byte, nranks, rank int) (backend.Comm, error) {
	if err := loadNccl(); err != nil {
		return nil, err
	}
	cc, ok := c.(*Context)
	if !ok || cc.closed {
		return nil, fmt.Errorf("nccl: not a live CUDA context: %w", backend.ErrInvalidContext)
	}
	if !cc.primary {
		return nil, fmt.Errorf("nccl: the session's context is not its device's primary context: %w", backend.ErrNotSupported)
	}
	if len(id) != C.GC_NCCL_ID_BYTES {
		return nil, fmt.Errorf("nccl: unique id of %d bytes: %w", len(id), backend.ErrInvalidValue)
	}
	cid := C.CBytes(id)
	defer C.free(cid)
	comm := (*unsafe.Pointer)(C.calloc(1, C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(unsafe.Pointer(comm))
	if rc := C.gc_nccl_init_rank(cc.ctx, comm, C.int(nranks), (*C.uchar)(cid), C.int(rank)); rc != 0 {
		return nil, ncclError("ncclCommInitRank", rc)
	}
	return &ncclComm{ctx: cc, comm: *comm}, nil
}

func (b *Backend) GroupStart() error {
	if err := loadNccl(); err != nil {
		return err
	}
	if rc := C.gc_nccl_group_start(); rc != 0 {
		return ncclError("ncclGroupStart", rc)
	}
	return nil
}

func (b *Backend) GroupEnd() error {
	if err := loadNccl(); err != nil {
		return err
	}
	if rc := C.gc_nccl_group_end(); rc != 0 {
		return ncclError("ncclGroupEnd", rc)
	}
	return nil
}

func (c *ncclComm) Post(op backend.CollectiveOp) error {
	s, err := c.ctx.stream(op.Stream)
	if err != nil {
		return fmt.Errorf("nccl: %w", err)
	}
	rc := C.gc_nccl_post(c.ctx.ctx, c.comm, C.int(op.Kind), C.uint64_t(op.Send), C.uint64_t(op.Recv), C.size_t(op.Count),
		C.int(op.Datatype), C.int(op.Op), C.int(op.Peer), s)
	if rc != 0 {
		return ncclError("nccl "+backend.CollectiveNames[op.Kind], rc)
	}
	return nil
}

// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum; a host scalar is copied (NCCL reads it
// during the call: ncclScalarHostImmediate).
func (c *ncclComm) RedOpCreatePreMulSum(datatype uint32, scalar []byte, dev uint64) (uint32, error) {
	if c.comm == nil {
		return 0, fmt.Errorf("nccl: ncclRedOpCreatePreMulSum on a freed communicator: %w", backend.ErrInvalidValue)
	}
	var op C.int
	var rc C.int
	if scalar != nil {
		buf := C.CBytes(append(scalar[:len(scalar):len(scalar)], make([]byte, 8)...)) // at least 8 bytes: any type's size
		defer C.free(buf)
		rc = C.gc_nccl_premul(c.ctx.ctx, c.comm, &op, buf, 0, C.int(datatype))
	} else {
		rc = C.gc_nccl_premul(c.ctx.ctx, c.comm, &op, nil, C.uint64_t(dev), C.int(datatype))
	}
	if rc != 0 {
		return 0, ncclError("ncclRedOpCreatePreMulSum", rc)
	}
	return uint32(op), nil
}

func (c *ncclComm) RedOpDestroy(op uint32) error {
	if c.comm == nil {
		return fmt.Errorf("nccl: ncclRedOpDestroy on a freed communicator: %w", backend.ErrInvalidValue)
	}
	if rc := C.gc_nccl_redop_destroy(c.ctx.ctx, c.comm, C.int(op)); rc != 0 {
		return ncclError("ncclRedOpDestroy", rc)
	}
	return nil
}

// Split is ncclCommSplit with NCCL's default configuration.
func (c *ncclComm) Split(color, key int) (backend.Comm, int, int, error) {
	if c.comm == nil {
		return nil, 0, 0, fmt.Errorf("nccl: ncclCommSplit of a freed communicator: %w", backend.ErrInvalidValue)
	}
	out := (*unsafe.Pointer)(C.calloc(1, C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(unsafe.Pointer(out))
	var rank, nranks C.int
	if rc := C.gc_nccl_split(c.ctx.ctx, c.comm, C.int(color), C.int(key), out, &rank, &nranks); rc != 0 {
		return nil, 0, 0, ncclError("ncclCommSplit", rc)
	}
	if *out == nil {
		return nil, 0, 0, nil
	}
	return &ncclComm{ctx: c.ctx, comm: *out}, int(rank), int(nranks), nil
}

func (c *ncclComm) query(what int, name string) (C.int, error) {
	if c.comm == nil {
		return 0, fmt.Errorf("nccl: %s on a freed communicator: %w", name, backend.ErrInvalidValue)
	}
	var async C.int
	if rc := C.gc_nccl_comm(c.ctx.ctx, c.comm, C.int(what), &async); rc != 0 {
		return 0, ncclError(name, rc)
	}
	return async, nil
}

func (c *ncclComm) AsyncError() error {
	async, err := c.query(0, "ncclCommGetAsyncError")
	if err == nil && async != 0 {
		err = ncclError("communicator", async)
	}
	return err
}

func (c *ncclComm) Finalize() error { _, err := c.query(1, "ncclCommFinalize"); return err }

func (c *ncclComm) Close() error {
	_, err := c.query(2, "ncclCommDestroy")
	c.comm = nil
	return err
}

func (c *ncclComm) Abort() error {
	_, err := c.query(3, "ncclCommAbort")
	c.comm = nil
	return err
}

// MemcpyPeer is cuMemcpyPeer from src's srcPtr to c's dst (backend.PeerCopier): NVLink or PCIe
// peer-to-peer between the two devices where they have it. The copy has ended on return.
func (c *Context) MemcpyPeer(dst uint64, src backend.Context, srcPtr, bytes uint64, _ backend.Handle) error {
	sc, ok := src.(*Context)
	if !ok || sc.closed || c.closed {
		return fmt.Errorf("cuda: peer copy between contexts that are not both live CUDA contexts: %w", backend.ErrInvalidContext)
	}
	return check("cuMemcpyPeer", C.gc_memcpy_peer(C.CUdeviceptr(dst), c.ctx, C.CUdeviceptr(srcPtr), sc.ctx, C.size_t(bytes)))
}

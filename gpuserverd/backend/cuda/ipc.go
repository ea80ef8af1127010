package cuda

/*
#include <stdlib.h>
#include "ipc.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// IPC between an instance's processes (issue 14) on the GPU: each worker is its own process on
// the same GPU, so NVIDIA's own IPC works between them. Legacy handles and pool pointers travel as
// NVIDIA's 64 bytes; shareable handles as the POSIX file descriptor the driver gives, which the
// server's registry hands the importing worker with SCM_RIGHTS. This path runs only on a GPU.

var (
	_ backend.IPC        = (*Context)(nil)
	_ backend.PoolAccess = (*Context)(nil)
)

const posixFD = 1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

func bytes64(b *[C.GC_IPC_HANDLE_SIZE]C.uchar) []byte {
	return C.GoBytes(unsafe.Pointer(&b[0]), C.GC_IPC_HANDLE_SIZE)
}

func handle64(blob []byte) (*C.uchar, error) {
	if len(blob) != C.GC_IPC_HANDLE_SIZE {
		return nil, fmt.Errorf("cuda: a %d-byte IPC handle, want %d: %w", len(blob), C.GC_IPC_HANDLE_SIZE, backend.ErrInvalidHandle)
	}
	return (*C.uchar)(C.CBytes(blob)), nil
}

func (c *Context) IpcExport(kind uint32, object uint64, handleType uint32) ([]byte, *os.File, error) {
	t, err := c.tables()
	if err != nil {
		return nil, nil, err
	}
	var out [C.GC_IPC_HANDLE_SIZE]C.uchar
	switch kind {
	case backend.IpcMemory:
		err := check("cuIpcGetMemHandle", C.gc_ipc_get_mem(c.ctx, &out[0], C.CUdeviceptr(object)))
		return bytes64(&out), nil, err
	case backend.IpcEvent:
		e, err := c.event(backend.Handle(object))
		if err != nil {
			return nil, nil, err
		}
		err = check("cuIpcGetEventHandle", C.gc_ipc_get_event(c.ctx, &out[0], e))
		return bytes64(&out), nil, err
	case backend.IpcPoolPointer:
		err := check("cuMemPoolExportPointer", C.gc_pool_export_ptr(c.ctx, &out[0], C.CUdeviceptr(object)))
		return bytes64(&out), nil, err
	}
	if handleType != posixFD {
		return nil, nil, fmt.Errorf("cuda: export as handle type %d: only POSIX file descriptors: %w", handleType, backend.ErrNotSupported)
	}
	var fd C.int = -1
	switch kind {
	case backend.IpcAllocation:
		err = check("cuMemExportToShareableHandle", C.gc_mem_export_fd(c.ctx, &fd, C.ulonglong(object)))
	case backend.IpcPool:
		var p C.CUmemoryPool
		if p, err = t.pools.get(backend.Handle(object)); err == nil {
			err = check("cuMemPoolExportToShareableHandle", C.gc_pool_export_fd(c.ctx, &fd, p))
		}
	default:
		return nil, nil, fmt.Errorf("cuda: export of kind %d: %w", kind, backend.ErrInvalidValue)
	}
	if err != nil {
		return nil, nil, err
	}
	return nil, os.NewFile(uintptr(fd), "cuda-shareable"), nil
}

func (c *Context) IpcImport(kind uint32, blob []byte, f *os.File, pool backend.Handle, flags uint32) (uint64, error) {
	t, err := c.tables()
	if err != nil {
		return 0, err
	}
	switch kind {
	case backend.IpcAllocation, backend.IpcPool:
		if f == nil {
			return 0, fmt.Errorf("cuda: a shareable handle without its descriptor: %w", backend.ErrInvalidHandle)
		}
		if kind == backend.IpcAllocation {
			var h C.ulonglong
			err := check("cuMemImportFromShareableHandle", C.gc_mem_import_fd(c.ctx, &h, C.int(f.Fd())))
			return uint64(h), err
		}
		var p C.CUmemoryPool
		if err := check("cuMemPoolImportFromShareableHandle", C.gc_pool_import_fd(c.ctx, &p, C.int(f.Fd()))); err != nil {
			return 0, err
		}
		return uint64(t.poolHandle(p)), nil
	}
	h, err := handle64(blob)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(h))
	switch kind {
	case backend.IpcMemory:
		var d C.CUdeviceptr
		err := check("cuIpcOpenMemHandle", C.gc_ipc_open_mem(c.ctx, &d, h, C.uint(flags)))
		return uint64(d), err
	case backend.IpcEvent:
		var e C.CUevent
		if err := check("cuIpcOpenEventHandle", C.gc_ipc_open_event(c.ctx, &e, h)); err != nil {
			return 0, err
		}
		return uint64(c.events.add(e)), nil
	case backend.IpcPoolPointer:
		p, err := t.pools.get(pool)
		if err != nil {
			return 0, err
		}
		var d C.CUdeviceptr
		if err := check("cuMemPoolImportPointer", C.gc_pool_import_ptr(c.ctx, &d, p, h)); err != nil {
			return 0, err
		}
		t.asyncBytes[uint64(d)] = 0 // freed with cuMemFreeAsync; the exporter's pool paid for it
		return uint64(d), nil
	}
	return 0, fmt.Errorf("cuda: import of kind %d: %w", kind, backend.ErrInvalidValue)
}

func (c *Context) IpcCloseMemory(ptr uint64) error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuIpcCloseMemHandle", C.gc_ipc_close_mem(c.ctx, C.CUdeviceptr(ptr)))
}

// location maps the session's device 0 to this context's device, as MemCreate does.
func (c *Context) location(locType uint32, locID int32) C.int {
	if locType == 1 && locID == 0 {
		return C.int(c.dev)
	}
	return C.int(locID)
}

func (c *Context) MemPoolGetAccess(pool backend.Handle, locType uint32, locID int32) (uint32, error) {
	_, p, err := famGet(c, poolsOf, pool)
	if err != nil {
		return 0, err
	}
	var v C.uint
	err = check("cuMemPoolGetAccess", C.gc_pool_get_access(c.ctx, &v, p, C.uint(locType), c.location(locType, locID)))
	return uint32(v), err
}

func (c *Context) MemPoolSetAccess(pool backend.Handle, locType uint32, locID int32, flags uint32) error {
	_, p, err := famGet(c, poolsOf, pool)
	if err != nil {
		return err
	}
	return check("cuMemPoolSetAccess", C.gc_pool_set_access(c.ctx, p, C.uint(locType), c.location(locType, locID), C.uint(flags)))
}

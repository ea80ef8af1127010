package cuda

/*
#include "libcall.h"
*/
import "C"

import (
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// RandTable is one of cuRAND's host tables as NVIDIA's libcurand holds it (its own static array,
// which lives as long as the library: the slice is read, never written or freed).
func (c *Context) RandTable(table uint32) ([]byte, error) {
	n, err := backend.RandTableSize(table)
	if err != nil {
		return nil, err
	}
	f := &backend.LibFunc{Lib: backend.LibRand, Name: "curandGetDirectionVectors/curandGetScrambleConstants"}
	if err := loadLib(backend.LibRand, f); err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	switch st := C.gc_rand_table(C.uint(table), &p); st {
	case 0:
	case C.GC_LIB_MISSING:
		return nil, backend.LibNotSupported(f, "NVIDIA's cuRAND has no such table function")
	default:
		return nil, &backend.LibError{Lib: backend.LibRand, Op: f.Name, Status: int32(st)}
	}
	return unsafe.Slice((*byte)(p), n), nil
}

package cuda

/*
#include "apicalls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// APICall runs a generically remoted driver function (apicalls_gen.c) in this context: devices
// arrive as the driver's ordinals and become CUdevices, handles become this context's objects
// (an unknown one is CUDA_ERROR_INVALID_HANDLE before the driver sees anything).
func (c *Context) APICall(f backend.APIFunc, args []uint64) ([]uint64, error) {
	if c.closed {
		return nil, errClosed
	}
	a := make([]C.uint64_t, len(args)+1) // never empty: its address is passed
	for i, v := range args {
		k := backend.ArgValue // the outputs' values before the call, past the parameters
		if i < len(f.Args) {
			k = f.Args[i]
		}
		switch k {
		case backend.ArgDevice:
			var d C.CUdevice
			if err := check("cuDeviceGet", C.gc_device_get(&d, C.int(v))); err != nil {
				return nil, err
			}
			v = uint64(d)
		case backend.ArgFunction:
			fn, err := c.function(backend.Handle(v))
			if err != nil {
				return nil, err
			}
			v = uint64(uintptr(unsafe.Pointer(fn.ptr)))
		case backend.ArgStream:
			s, err := c.stream(backend.Handle(v))
			if err != nil {
				return nil, err
			}
			v = uint64(uintptr(unsafe.Pointer(s)))
		case backend.ArgEvent:
			e, err := c.event(backend.Handle(v))
			if err != nil {
				return nil, err
			}
			v = uint64(uintptr(unsafe.Pointer(e)))
		}
		a[i] = C.uint64_t(v)
	}
	o := make([]C.uint64_t, len(args)+1)
	if err := check(f.Name, C.gc_api_call(c.ctx, C.int(f.ID), &a[0], &o[0])); err != nil {
		return nil, fmt.Errorf("generic call: %w", err)
	}
	out := make([]uint64, len(f.Args))
	for i := range out {
		out[i] = uint64(o[i])
	}
	return out, nil
}

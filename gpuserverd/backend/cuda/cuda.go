// Package cuda is gpuserverd's real backend: the CUDA driver API of the machine, loaded at run
// time with dlopen("libcuda.so.1"), so gpuserverd builds without the CUDA toolkit and starts
// (with a clear error) where no driver is installed.
//
// A CUDA context is current per OS thread, and goroutines move between threads. Rather than pin a
// thread per context, every driver call here goes through a C wrapper that makes the context
// current and makes the call within one cgo call, which runs on one thread from start to end.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// Kind is the registry name of this backend.
const Kind = "cuda"

// LibraryName is the driver library Open loads.
const LibraryName = "libcuda.so.1"

func init() { backend.Register(Kind, func() (backend.Backend, error) { return Open() }) }

// libraryName is what Open loads; tests point it at a fake driver in a child process.
var libraryName = LibraryName

var (
	loadMu   sync.Mutex
	loaded   atomic.Bool
	initDone bool
)

// load dlopens name and resolves the entry points; once a load succeeded later calls are no-ops.
func load(name string) error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded.Load() {
		return nil
	}
	if err := loadUncached(name); err != nil {
		return err
	}
	loaded.Store(true)
	return nil
}

// loadUncached dlopens name and, only if every required symbol is there, makes it the driver.
func loadUncached(name string) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var buf [512]C.char
	if C.gc_driver_open(cname, &buf[0], C.size_t(len(buf))) != 0 {
		return fmt.Errorf("load CUDA driver %s: %s", name, C.GoString(&buf[0]))
	}
	return nil
}

// Backend is the CUDA driver of this machine.
type Backend struct{}

// Open loads libcuda.so.1, initialises the driver and checks that there is at least one device.
func Open() (*Backend, error) {
	if err := load(libraryName); err != nil {
		return nil, err
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	if !initDone {
		if err := check("cuInit", C.gc_init()); err != nil {
			return nil, err
		}
		initDone = true
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.gc_device_count(&n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("cuda: the driver sees no device: %w", backend.ErrNoDevice)
	}
	return &Backend{}, nil
}

// Kind implements backend.Backend.
func (*Backend) Kind() string { return Kind }

// DriverVersion is the driver's CUDA version, e.g. 13000 for 13.0.
func (*Backend) DriverVersion() (int32, error) {
	var v C.int
	if err := check("cuDriverGetVersion", C.gc_driver_version(&v)); err != nil {
		return 0, err
	}
	return int32(v), nil
}

func device(ordinal int) (C.CUdevice, error) {
	var d C.CUdevice
	if ordinal < 0 || ordinal > 1<<20 {
		return 0, fmt.Errorf("cuda: device ordinal %d: %w", ordinal, backend.ErrInvalidDevice)
	}
	return d, check("cuDeviceGet", C.gc_device_get(&d, C.int(ordinal)))
}

// Devices lists every device the driver sees, in ordinal order.
func (b *Backend) Devices() ([]backend.Device, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.gc_device_count(&n)); err != nil {
		return nil, err
	}
	devs := make([]backend.Device, 0, int(n))
	for i := 0; i < int(n); i++ {
		d, err := describe(i)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Device attributes used by describe (CUdevice_attribute).
const (
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
)

func describe(ordinal int) (backend.Device, error) {
	out := backend.Device{Ordinal: ordinal}
	d, err := device(ordinal)
	if err != nil {
		return out, err
	}
	var name [256]C.char
	if err := check("cuDeviceGetName", C.gc_device_name(&name[0], C.int(len(name)), d)); err != nil {
		return out, err
	}
	out.Name = C.GoString(&name[0])
	var uuid [16]C.uchar
	if err := check("cuDeviceGetUuid_v2", C.gc_device_uuid(&uuid[0], d)); err != nil {
		return out, err
	}
	out.UUID = FormatUUID(*(*[16]byte)(unsafe.Pointer(&uuid)))
	var total C.size_t
	if err := check("cuDeviceTotalMem_v2", C.gc_device_total_mem(&total, d)); err != nil {
		return out, err
	}
	out.TotalMemory = uint64(total)
	var major, minor C.int
	if err := check("cuDeviceGetAttribute", C.gc_device_attribute(&major, attrComputeCapabilityMajor, d)); err != nil {
		return out, err
	}
	if err := check("cuDeviceGetAttribute", C.gc_device_attribute(&minor, attrComputeCapabilityMinor, d)); err != nil {
		return out, err
	}
	out.Major, out.Minor = int(major), int(minor)
	var bus [32]C.char
	if err := check("cuDeviceGetPCIBusId", C.gc_device_pci_bus_id(&bus[0], C.int(len(bus)), d)); err != nil {
		return out, err
	}
	out.PCIBusID = C.GoString(&bus[0])
	return out, nil
}

// FormatUUID writes a driver UUID the way NVML and nvidia-smi name GPUs: "GPU-8-4-4-4-12" hex.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// DeviceAttribute is cuDeviceGetAttribute.
func (*Backend) DeviceAttribute(ordinal int, attr int32) (int32, error) {
	d, err := device(ordinal)
	if err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDeviceGetAttribute", C.gc_device_attribute(&v, C.int(attr), d)); err != nil {
		return 0, err
	}
	return int32(v), nil
}

// NewContext creates a context on the device (cuCtxCreate, or its primary context on a driver
// that no longer exports cuCtxCreate_v2).
func (*Backend) NewContext(ordinal int) (backend.Context, error) {
	c, err := newDeviceContext(ordinal, false)
	if err != nil {
		return nil, err
	}
	c.reserveFirst()
	return c, nil
}

// NewPrimaryContext retains the device's primary context (backend.PrimaryContexts): NVIDIA's NCCL
// and its proxy threads work in it whatever context is current.
func (*Backend) NewPrimaryContext(ordinal int) (backend.Context, error) {
	c, err := newDeviceContext(ordinal, true)
	if err != nil {
		return nil, err
	}
	c.reserveFirst()
	return c, nil
}

func newDeviceContext(ordinal int, wantPrimary bool) (*Context, error) {
	d, err := device(ordinal)
	if err != nil {
		return nil, err
	}
	c := newContext()
	c.dev = d
	primary := boolInt(wantPrimary)
	if err := check("cuCtxCreate", C.gc_ctx_create(&c.ctx, 0, d, &primary)); err != nil {
		return nil, err
	}
	c.primary = primary != 0
	return c, nil
}

// check turns a driver status into nil or an error that wraps the driver's code.
func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: backend.Result(r)}
}

// Error is a failed driver call; errors.As finds its backend.Result.
type Error struct {
	Op   string
	Code backend.Result
}

func (e *Error) Error() string {
	name := "unknown error"
	if loaded.Load() {
		if s := C.gc_error_name(C.CUresult(e.Code)); s != nil {
			name = C.GoString(s)
		}
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, name, int32(e.Code))
}

func (e *Error) Unwrap() error { return e.Code }

package cuda

/*
#include <stdlib.h>
#include <string.h>
#include "driver.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

type module struct {
	ptr   C.CUmodule
	funcs []backend.Handle
	// image is what the guest loaded, for a restore. pinned are its globals placed in the
	// session's range (pinned.go; name -> address, bytes); globals those the driver placed whose
	// address the program asked for, and placedBy why the driver placed them.
	image    []byte
	pinned   map[string]pin
	pinnedBy string // how the module was loaded with them there
	globals  map[string][2]uint64
	placedBy string
	// names are the globals its image defines, found at its first checkpoint (driverglobals.go)
	// and kept: a migration's pause reads no module image again.
	names    []string
	namesErr error
	named    bool
}

type function struct {
	ptr    C.CUfunction
	layout []backend.Param // nil until ParamLayout or the first launch asks
	known  bool            // layout was asked for (it may be legitimately empty)
	// module and name find the function again in a restored context; attrs are those set.
	module backend.Handle
	name   string
	attrs  map[int32]int32
}

// Context is one session's CUDA context. Like every backend.Context it is used by one goroutine at
// a time, so it holds no lock.
type Context struct {
	ctx     C.CUcontext
	dev     C.CUdevice
	primary bool
	closed  bool

	next      backend.Handle
	modules   handles[*module]
	functions handles[*function]
	streams   handles[C.CUstream]
	events    handles[C.CUevent]
	host      map[unsafe.Pointer]int // pinned host allocations: address -> size
	reg       map[unsafe.Pointer]int // registered host ranges: address -> size
	blas      map[backend.Handle]*blasHandle
	fam       *famTables // the hand-written families' objects (families.go), made on first use
	dnn       dnnObjects
	lt        ltObjects   // NVIDIA's cuBLASLt objects, by attribute list
	scratch   hostScratch // cuSOLVER's host workspaces (libcall.go)

	mem        *vaSpace // the program's allocations (sessionmem.go), reserved on first use
	streamFlag map[backend.Handle]uint32
	eventFlag  map[backend.Handle]uint32
	limits     map[int32]uint64 // limits the program set
	cacheSet   *int32           // the cache preference the program set
}

var _ backend.Context = (*Context)(nil)

func newContext() *Context {
	c := &Context{host: map[unsafe.Pointer]int{}, streamFlag: map[backend.Handle]uint32{}, eventFlag: map[backend.Handle]uint32{}}
	c.modules = newHandles[*module]("module", &c.next)
	c.functions = newHandles[*function]("function", &c.next)
	c.streams = newHandles[C.CUstream]("stream", &c.next)
	c.events = newHandles[C.CUevent]("event", &c.next)
	return c
}

var errClosed = fmt.Errorf("cuda: context is closed: %w", backend.ErrInvalidContext)

func (c *Context) stream(h backend.Handle) (C.CUstream, error) {
	if c.closed {
		return nil, errClosed
	}
	if h == 0 {
		return nil, nil // the default stream
	}
	return c.streams.get(h)
}

// event, function and module look a handle up in a live context.
func (c *Context) event(h backend.Handle) (C.CUevent, error) {
	if c.closed {
		return nil, errClosed
	}
	return c.events.get(h)
}

func (c *Context) function(h backend.Handle) (*function, error) {
	if c.closed {
		return nil, errClosed
	}
	return c.functions.get(h)
}

func (c *Context) module(h backend.Handle) (*module, error) {
	if c.closed {
		return nil, errClosed
	}
	return c.modules.get(h)
}

func (c *Context) live() error {
	if c.closed {
		return errClosed
	}
	return nil
}

// MemGetInfo is cuMemGetInfo.
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	if err := c.live(); err != nil {
		return 0, 0, err
	}
	var f, t C.size_t
	if err := check("cuMemGetInfo", C.gc_mem_get_info(c.ctx, &f, &t)); err != nil {
		return 0, 0, err
	}
	return uint64(f), uint64(t), nil
}

// HostAlloc is cuMemHostAlloc (portable, page-locked): the driver DMAs from it directly.
func (c *Context) HostAlloc(bytes int) ([]byte, error) {
	if err := c.live(); err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: host allocation of %d bytes: %w", bytes, backend.ErrInvalidValue)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.gc_mem_host_alloc(c.ctx, &p, C.size_t(bytes))); err != nil {
		return nil, err
	}
	c.host[p] = bytes
	return unsafe.Slice((*byte)(p), bytes), nil
}

// HostFree is cuMemFreeHost of a buffer HostAlloc returned.
func (c *Context) HostFree(buf []byte) error {
	if err := c.live(); err != nil {
		return err
	}
	if len(buf) == 0 {
		return fmt.Errorf("cuda: free of an empty host buffer: %w", backend.ErrInvalidValue)
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	if _, ok := c.host[p]; !ok {
		return fmt.Errorf("cuda: host buffer %p was not allocated by HostAlloc: %w", p, backend.ErrInvalidValue)
	}
	delete(c.host, p)
	return check("cuMemFreeHost", C.gc_mem_host_free(c.ctx, p))
}

// HostRegister is cuMemHostRegister (portable) of memory the worker mapped: the guest's shared
// arena, which the device then DMAs from and to with no staging copy.
func (c *Context) HostRegister(buf []byte) error {
	if err := c.live(); err != nil {
		return err
	}
	if len(buf) == 0 {
		return fmt.Errorf("cuda: register of an empty host range: %w", backend.ErrInvalidValue)
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	if _, ok := c.reg[p]; ok {
		return fmt.Errorf("cuda: host range %p already registered: %w", p, backend.ErrInvalidValue)
	}
	if err := check("cuMemHostRegister", C.gc_mem_host_register(c.ctx, p, C.size_t(len(buf)))); err != nil {
		return err
	}
	if c.reg == nil {
		c.reg = map[unsafe.Pointer]int{}
	}
	c.reg[p] = len(buf)
	return nil
}

// HostUnregister is cuMemHostUnregister of a range HostRegister registered.
func (c *Context) HostUnregister(buf []byte) error {
	if err := c.live(); err != nil {
		return err
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	if _, ok := c.reg[p]; !ok || len(buf) == 0 {
		return fmt.Errorf("cuda: host range %p was not registered: %w", p, backend.ErrInvalidValue)
	}
	delete(c.reg, p)
	return check("cuMemHostUnregister", C.gc_mem_host_unregister(c.ctx, p))
}

func asyncFlag(async bool) C.int {
	if async {
		return 1
	}
	return 0
}

// MemcpyHtoD is cuMemcpyHtoD[Async].
func (c *Context) MemcpyHtoD(dst uint64, src []byte, stream backend.Handle, async bool) error {
	s, err := c.stream(stream)
	if err != nil || len(src) == 0 {
		return err
	}
	return check("cuMemcpyHtoD", C.gc_memcpy_htod(c.ctx, C.CUdeviceptr(dst), unsafe.Pointer(unsafe.SliceData(src)),
		C.size_t(len(src)), s, asyncFlag(async)))
}

// MemcpyDtoH is cuMemcpyDtoH[Async].
func (c *Context) MemcpyDtoH(dst []byte, src uint64, stream backend.Handle, async bool) error {
	s, err := c.stream(stream)
	if err != nil || len(dst) == 0 {
		return err
	}
	return check("cuMemcpyDtoH", C.gc_memcpy_dtoh(c.ctx, unsafe.Pointer(unsafe.SliceData(dst)), C.CUdeviceptr(src),
		C.size_t(len(dst)), s, asyncFlag(async)))
}

// MemcpyDtoD is cuMemcpyDtoD[Async].
func (c *Context) MemcpyDtoD(dst, src, bytes uint64, stream backend.Handle, async bool) error {
	s, err := c.stream(stream)
	if err != nil || bytes == 0 {
		return err
	}
	return check("cuMemcpyDtoD", C.gc_memcpy_dtod(c.ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), s, asyncFlag(async)))
}

// Memset is cuMemsetD8/D16/D32[Async].
func (c *Context) Memset(dst uint64, value uint32, elemSize int, count uint64, stream backend.Handle, async bool) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return fmt.Errorf("cuda: memset element size %d is not 1, 2 or 4: %w", elemSize, backend.ErrInvalidValue)
	}
	return check(fmt.Sprintf("cuMemsetD%d", elemSize*8), C.gc_memset(c.ctx, C.CUdeviceptr(dst), C.uint(value),
		C.int(elemSize), C.size_t(count), s, asyncFlag(async)))
}

// ModuleLoadData is cuModuleLoadData on a cubin, fat binary or PTX image; with movable memory,
// a PTX module's globals are placed in the session's range (pinned.go).
func (c *Context) ModuleLoadData(image []byte) (backend.Handle, error) {
	return c.loadModule(image, Movable)
}

func (c *Context) loadModule(image []byte, pin bool) (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: empty module image: %w", backend.ErrInvalidImage)
	}
	// PTX is read as a C string, so the copy the driver sees always ends in a NUL.
	img := C.malloc(C.size_t(len(image) + 1))
	defer C.free(img)
	buf := unsafe.Slice((*byte)(img), len(image)+1)
	copy(buf, image)
	buf[len(image)] = 0
	var m C.CUmodule
	if err := check("cuModuleLoadData", C.gc_module_load_data(c.ctx, &m, img)); err != nil {
		return 0, err
	}
	mod := &module{ptr: m, image: append([]byte(nil), image...)}
	if pin {
		c.pinGlobals(mod)
	}
	return c.modules.add(mod), nil
}

// ModuleUnload is cuModuleUnload; the module's function handles go with it.
func (c *Context) ModuleUnload(h backend.Handle) error {
	m, err := c.module(h)
	if err != nil {
		return err
	}
	c.modules.remove(h)
	for _, f := range m.funcs {
		c.functions.remove(f)
	}
	if err := check("cuModuleUnload", C.gc_module_unload(c.ctx, m.ptr)); err != nil {
		return err
	}
	return c.unpin(m)
}

// ModuleGetFunction is cuModuleGetFunction.
func (c *Context) ModuleGetFunction(h backend.Handle, name string) (backend.Handle, error) {
	m, err := c.module(h)
	if err != nil {
		return 0, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.CUfunction
	if err := check("cuModuleGetFunction "+name, C.gc_module_get_function(c.ctx, &f, m.ptr, cname)); err != nil {
		return 0, err
	}
	id := c.functions.add(&function{ptr: f, module: h, name: name})
	m.funcs = append(m.funcs, id)
	return id, nil
}

// ModuleGetGlobal is cuModuleGetGlobal.
func (c *Context) ModuleGetGlobal(h backend.Handle, name string) (ptr, bytes uint64, err error) {
	m, err := c.module(h)
	if err != nil {
		return 0, 0, err
	}
	if p, ok := m.pinned[name]; ok {
		return p[0], p[1], nil
	}
	p, n, err := c.rawGlobal(m.ptr, name)
	if err != nil {
		return 0, 0, err
	}
	if m.globals == nil {
		m.globals = map[string][2]uint64{}
	}
	m.globals[name] = [2]uint64{p, n}
	return p, n, nil
}

// maxParams bounds the cuFuncGetParamInfo walk; CUDA kernels have at most 32 KiB of parameters.
const maxParams = 32 << 10

// ParamLayout asks cuFuncGetParamInfo (CUDA 12.4+) for each parameter until the driver says
// the index is past the last one.
func (c *Context) ParamLayout(h backend.Handle) ([]backend.Param, error) {
	f, err := c.function(h)
	if err != nil {
		return nil, err
	}
	if f.known {
		return f.layout, nil
	}
	if C.gc_has_param_info() == 0 {
		return nil, fmt.Errorf("cuda: driver has no cuFuncGetParamInfo (needs CUDA 12.4): %w", backend.ErrNotSupported)
	}
	var layout []backend.Param
	for i := 0; i < maxParams; i++ {
		var off, size C.size_t
		r := C.gc_func_param_info(c.ctx, f.ptr, C.size_t(i), &off, &size)
		if backend.Result(r) == backend.ErrInvalidValue {
			break // past the last parameter
		}
		if err := check("cuFuncGetParamInfo", r); err != nil {
			return nil, err
		}
		layout = append(layout, backend.Param{Offset: uint32(off), Size: uint32(size)})
	}
	f.layout, f.known = layout, true
	return layout, nil
}

// FuncGetAttribute is cuFuncGetAttribute.
func (c *Context) FuncGetAttribute(h backend.Handle, attr int32) (int32, error) {
	f, err := c.function(h)
	if err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuFuncGetAttribute", C.gc_func_get_attribute(c.ctx, &v, C.int(attr), f.ptr)); err != nil {
		return 0, err
	}
	return int32(v), nil
}

// FuncSetAttribute is cuFuncSetAttribute.
func (c *Context) FuncSetAttribute(h backend.Handle, attr, value int32) error {
	f, err := c.function(h)
	if err != nil {
		return err
	}
	if err := check("cuFuncSetAttribute", C.gc_func_set_attribute(c.ctx, f.ptr, C.int(attr), C.int(value))); err != nil {
		return err
	}
	if f.attrs == nil {
		f.attrs = map[int32]int32{}
	}
	f.attrs[attr] = value
	return nil
}

// OccupancyMaxActiveBlocks is cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags.
func (c *Context) OccupancyMaxActiveBlocks(h backend.Handle, blockSize int32, dynamicShared uint64, flags uint32) (int32, error) {
	f, err := c.function(h)
	if err != nil {
		return 0, err
	}
	var n C.int
	rc := C.gc_occupancy(c.ctx, &n, f.ptr, C.int(blockSize), C.size_t(dynamicShared), C.unsigned(flags))
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", rc); err != nil {
		return 0, err
	}
	return int32(n), nil
}

// SetLimit is cuCtxSetLimit.
func (c *Context) SetLimit(limit int32, value uint64) error {
	if err := check("cuCtxSetLimit", C.gc_ctx_set_limit(c.ctx, C.int(limit), C.size_t(value))); err != nil {
		return err
	}
	if c.limits == nil {
		c.limits = map[int32]uint64{}
	}
	c.limits[limit] = value
	return nil
}

// Limit is cuCtxGetLimit.
func (c *Context) Limit(limit int32) (uint64, error) {
	var v C.size_t
	if err := check("cuCtxGetLimit", C.gc_ctx_get_limit(c.ctx, &v, C.int(limit))); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// SetCacheConfig is cuCtxSetCacheConfig.
func (c *Context) SetCacheConfig(config int32) error {
	if err := check("cuCtxSetCacheConfig", C.gc_ctx_set_cache_config(c.ctx, C.int(config))); err != nil {
		return err
	}
	c.cacheSet = &config
	return nil
}

// CacheConfig is cuCtxGetCacheConfig.
func (c *Context) CacheConfig() (int32, error) {
	var v C.int
	if err := check("cuCtxGetCacheConfig", C.gc_ctx_get_cache_config(c.ctx, &v)); err != nil {
		return 0, err
	}
	return int32(v), nil
}

// LaunchKernel is cuLaunchKernel with the parameters as one packed buffer. The buffer is checked
// against the function's layout first so a short buffer never makes the driver read past it.
func (c *Context) LaunchKernel(cfg backend.LaunchConfig) error {
	s, err := c.stream(cfg.Stream)
	if err != nil {
		return err
	}
	f, err := c.function(cfg.Function)
	if err != nil {
		return err
	}
	layout, err := c.ParamLayout(cfg.Function)
	if err != nil && !errors.Is(err, backend.ErrNotSupported) {
		return err
	}
	need := 0
	if n := len(layout); n > 0 {
		need = int(layout[n-1].Offset + layout[n-1].Size)
	}
	if len(cfg.Params) < need {
		return fmt.Errorf("cuda: launch: %d parameter bytes, the kernel takes %d: %w", len(cfg.Params), need, backend.ErrInvalidValue)
	}
	var params unsafe.Pointer
	if len(cfg.Params) > 0 {
		params = unsafe.Pointer(unsafe.SliceData(cfg.Params))
	}
	g, b := cfg.Grid, cfg.Block
	return check("cuLaunchKernel", C.gc_launch(c.ctx, f.ptr, C.uint(g[0]), C.uint(g[1]), C.uint(g[2]),
		C.uint(b[0]), C.uint(b[1]), C.uint(b[2]), C.uint(cfg.SharedMemBytes), s, params, C.size_t(len(cfg.Params))))
}

// StreamCreate is cuStreamCreate.
func (c *Context) StreamCreate(flags uint32) (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var s C.CUstream
	if err := check("cuStreamCreate", C.gc_stream_create(c.ctx, &s, C.uint(flags))); err != nil {
		return 0, err
	}
	h := c.streams.add(s)
	c.streamFlag[h] = flags
	return h, nil
}

// StreamDestroy is cuStreamDestroy; the default stream cannot be destroyed.
func (c *Context) StreamDestroy(h backend.Handle) error {
	if err := c.live(); err != nil {
		return err
	}
	s, err := c.streams.get(h)
	if err != nil {
		return err
	}
	c.streams.remove(h)
	delete(c.streamFlag, h)
	return check("cuStreamDestroy", C.gc_stream_destroy(c.ctx, s))
}

// StreamSynchronize is cuStreamSynchronize.
func (c *Context) StreamSynchronize(h backend.Handle) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	return check("cuStreamSynchronize", C.gc_stream_synchronize(c.ctx, s))
}

// StreamQuery is cuStreamQuery: nil when idle, an error wrapping ErrNotReady while busy.
func (c *Context) StreamQuery(h backend.Handle) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	return check("cuStreamQuery", C.gc_stream_query(c.ctx, s))
}

// StreamWaitEvent is cuStreamWaitEvent.
func (c *Context) StreamWaitEvent(stream, event backend.Handle) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	e, err := c.event(event)
	if err != nil {
		return err
	}
	return check("cuStreamWaitEvent", C.gc_stream_wait_event(c.ctx, s, e))
}

// EventCreate is cuEventCreate.
func (c *Context) EventCreate(flags uint32) (backend.Handle, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	var e C.CUevent
	if err := check("cuEventCreate", C.gc_event_create(c.ctx, &e, C.uint(flags))); err != nil {
		return 0, err
	}
	h := c.events.add(e)
	c.eventFlag[h] = flags
	return h, nil
}

// EventDestroy is cuEventDestroy.
func (c *Context) EventDestroy(h backend.Handle) error {
	e, err := c.event(h)
	if err != nil {
		return err
	}
	c.events.remove(h)
	delete(c.eventFlag, h)
	return check("cuEventDestroy", C.gc_event_destroy(c.ctx, e))
}

// EventRecord is cuEventRecord.
func (c *Context) EventRecord(event, stream backend.Handle) error {
	s, err := c.stream(stream)
	if err != nil {
		return err
	}
	e, err := c.events.get(event)
	if err != nil {
		return err
	}
	return check("cuEventRecord", C.gc_event_record(c.ctx, e, s))
}

// EventSynchronize is cuEventSynchronize.
func (c *Context) EventSynchronize(h backend.Handle) error {
	e, err := c.event(h)
	if err != nil {
		return err
	}
	return check("cuEventSynchronize", C.gc_event_synchronize(c.ctx, e))
}

// EventQuery is cuEventQuery.
func (c *Context) EventQuery(h backend.Handle) error {
	e, err := c.event(h)
	if err != nil {
		return err
	}
	return check("cuEventQuery", C.gc_event_query(c.ctx, e))
}

// EventElapsedTime is cuEventElapsedTime, in milliseconds.
func (c *Context) EventElapsedTime(start, end backend.Handle) (float32, error) {
	a, err := c.event(start)
	if err != nil {
		return 0, err
	}
	b, err := c.events.get(end)
	if err != nil {
		return 0, err
	}
	var ms C.float
	if err := check("cuEventElapsedTime", C.gc_event_elapsed(c.ctx, &ms, a, b)); err != nil {
		return 0, err
	}
	return float32(ms), nil
}

// Synchronize is cuCtxSynchronize.
func (c *Context) Synchronize() error {
	if err := c.live(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", C.gc_ctx_synchronize(c.ctx))
}

// Close destroys the context; the driver frees its memory, modules, streams and events with it.
// Pinned host buffers are freed explicitly first, so a worker that closes one session and opens
// another never depends on the driver tying them to the context.
func (c *Context) Close() error {
	if c.closed {
		return nil
	}
	errs := append(c.closeDnn(), c.closeBlas()...)
	errs = append(errs, c.closeScratch()...)
	for p := range c.host {
		errs = append(errs, check("cuMemFreeHost", C.gc_mem_host_free(c.ctx, p)))
	}
	for p := range c.reg {
		errs = append(errs, check("cuMemHostUnregister", C.gc_mem_host_unregister(c.ctx, p)))
	}
	c.reg = nil
	errs = append(errs, c.releaseSpace()...)
	c.closed = true
	errs = append(errs, check("cuCtxDestroy", C.gc_ctx_destroy(c.ctx, c.dev, boolInt(c.primary))))
	c.host = nil
	return errors.Join(errs...)
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// HostDevicePointer is cuMemHostGetDevicePointer of a range HostRegister registered (device-mapped):
// the address a kernel reaches the host's bytes at.
func (c *Context) HostDevicePointer(buf []byte) (uint64, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	if n, ok := c.reg[p]; !ok || n != len(buf) {
		return 0, fmt.Errorf("cuda: host range %p+%d is not registered: %w", p, len(buf), backend.ErrInvalidValue)
	}
	var dp C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.gc_mem_host_device_pointer(c.ctx, &dp, p)); err != nil {
		return 0, err
	}
	return uint64(dp), nil
}

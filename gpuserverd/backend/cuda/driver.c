// Run-time binding to libcuda.so.1: dlopen, dlsym of the versioned entry points, and thin wrappers
// that Go calls through cgo (Go cannot call a C function pointer itself).
#include "driver.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02

// X(field, symbol, return-and-arguments). The symbols are the versioned names cuda.h maps the plain
// names to, so we bind the same ABI a program compiled against CUDA 12/13 headers would.
#define REQUIRED_SYMBOLS(X)                                                                        \
	X(get_error_name, "cuGetErrorName", CUresult (*)(CUresult, const char **))                     \
	X(init, "cuInit", CUresult (*)(unsigned))                                                      \
	X(driver_get_version, "cuDriverGetVersion", CUresult (*)(int *))                               \
	X(device_get_count, "cuDeviceGetCount", CUresult (*)(int *))                                   \
	X(device_get, "cuDeviceGet", CUresult (*)(CUdevice *, int))                                    \
	X(device_get_name, "cuDeviceGetName", CUresult (*)(char *, int, CUdevice))                     \
	X(device_get_uuid, "cuDeviceGetUuid_v2", CUresult (*)(unsigned char *, CUdevice))              \
	X(device_total_mem, "cuDeviceTotalMem_v2", CUresult (*)(size_t *, CUdevice))                   \
	X(device_get_attribute, "cuDeviceGetAttribute", CUresult (*)(int *, int, CUdevice))            \
	X(device_get_pci_bus_id, "cuDeviceGetPCIBusId", CUresult (*)(char *, int, CUdevice))           \
	X(ctx_destroy, "cuCtxDestroy_v2", CUresult (*)(CUcontext))                                     \
	X(primary_retain, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice))            \
	X(primary_release, "cuDevicePrimaryCtxRelease_v2", CUresult (*)(CUdevice))                    \
	X(ctx_pop_current, "cuCtxPopCurrent_v2", CUresult (*)(CUcontext *))                            \
	X(ctx_set_current, "cuCtxSetCurrent", CUresult (*)(CUcontext))                                 \
	X(ctx_get_current, "cuCtxGetCurrent", CUresult (*)(CUcontext *))                               \
	X(ctx_synchronize, "cuCtxSynchronize", CUresult (*)(void))                                     \
	X(mem_alloc, "cuMemAlloc_v2", CUresult (*)(CUdeviceptr *, size_t))                             \
	X(mem_free, "cuMemFree_v2", CUresult (*)(CUdeviceptr))                                         \
	X(mem_get_info, "cuMemGetInfo_v2", CUresult (*)(size_t *, size_t *))                           \
	X(mem_host_alloc, "cuMemHostAlloc", CUresult (*)(void **, size_t, unsigned))                   \
	X(mem_free_host, "cuMemFreeHost", CUresult (*)(void *))                                        \
	X(mem_host_register, "cuMemHostRegister_v2", CUresult (*)(void *, size_t, unsigned))           \
	X(mem_host_unregister, "cuMemHostUnregister", CUresult (*)(void *))                            \
	X(memcpy_htod, "cuMemcpyHtoD_v2", CUresult (*)(CUdeviceptr, const void *, size_t))             \
	X(memcpy_dtoh, "cuMemcpyDtoH_v2", CUresult (*)(void *, CUdeviceptr, size_t))                   \
	X(memcpy_dtod, "cuMemcpyDtoD_v2", CUresult (*)(CUdeviceptr, CUdeviceptr, size_t))              \
	X(memcpy_htod_async, "cuMemcpyHtoDAsync_v2",                                                   \
	  CUresult (*)(CUdeviceptr, const void *, size_t, CUstream))                                   \
	X(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", CUresult (*)(void *, CUdeviceptr, size_t, CUstream)) \
	X(memcpy_peer, "cuMemcpyPeer", CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t))  \
	X(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2",                                                   \
	  CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))                                    \
	X(memset_d8, "cuMemsetD8_v2", CUresult (*)(CUdeviceptr, unsigned char, size_t))                \
	X(memset_d16, "cuMemsetD16_v2", CUresult (*)(CUdeviceptr, unsigned short, size_t))             \
	X(memset_d32, "cuMemsetD32_v2", CUresult (*)(CUdeviceptr, unsigned, size_t))                   \
	X(memset_d8_async, "cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream)) \
	X(memset_d16_async, "cuMemsetD16Async",                                                        \
	  CUresult (*)(CUdeviceptr, unsigned short, size_t, CUstream))                                 \
	X(memset_d32_async, "cuMemsetD32Async", CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream)) \
	X(module_load_data, "cuModuleLoadData", CUresult (*)(CUmodule *, const void *))                \
	X(module_unload, "cuModuleUnload", CUresult (*)(CUmodule))                                     \
	X(module_get_function, "cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *)) \
	X(module_get_global, "cuModuleGetGlobal_v2",                                                   \
	  CUresult (*)(CUdeviceptr *, size_t *, CUmodule, const char *))                               \
	X(func_get_attribute, "cuFuncGetAttribute", CUresult (*)(int *, int, CUfunction))              \
	X(func_set_attribute, "cuFuncSetAttribute", CUresult (*)(CUfunction, int, int))                \
	X(ctx_set_limit, "cuCtxSetLimit", CUresult (*)(int, size_t))                                   \
	X(ctx_get_limit, "cuCtxGetLimit", CUresult (*)(size_t *, int))                                 \
	X(ctx_set_cache_config, "cuCtxSetCacheConfig", CUresult (*)(int))                              \
	X(ctx_get_cache_config, "cuCtxGetCacheConfig", CUresult (*)(int *))                            \
	X(occupancy, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",                           \
	  CUresult (*)(int *, CUfunction, int, size_t, unsigned))                                      \
	X(launch_kernel, "cuLaunchKernel",                                                             \
	  CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,         \
	               unsigned, CUstream, void **, void **))                                          \
	X(stream_create, "cuStreamCreate", CUresult (*)(CUstream *, unsigned))                         \
	X(stream_destroy, "cuStreamDestroy_v2", CUresult (*)(CUstream))                                \
	X(stream_synchronize, "cuStreamSynchronize", CUresult (*)(CUstream))                           \
	X(stream_query, "cuStreamQuery", CUresult (*)(CUstream))                                       \
	X(stream_wait_event, "cuStreamWaitEvent", CUresult (*)(CUstream, CUevent, unsigned))           \
	X(event_create, "cuEventCreate", CUresult (*)(CUevent *, unsigned))                            \
	X(event_destroy, "cuEventDestroy_v2", CUresult (*)(CUevent))                                   \
	X(event_record, "cuEventRecord", CUresult (*)(CUevent, CUstream))                              \
	X(event_synchronize, "cuEventSynchronize", CUresult (*)(CUevent))                              \
	X(event_query, "cuEventQuery", CUresult (*)(CUevent))                                          \
	X(event_elapsed_time, "cuEventElapsedTime", CUresult (*)(float *, CUevent, CUevent))

struct driver {
	REQUIRED_SYMBOLS(GC_DL_DECLARE)
	// Optional: a driver without cuCtxCreate_v2 (CUDA 13 headers map to _v4) gets the device's
	// primary context instead, which is as good in a worker process that holds one session.
	CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice);
	// Optional: CUDA 12.4+. Without it ParamLayout reports CUDA_ERROR_NOT_SUPPORTED.
	CUresult (*func_get_param_info)(CUfunction, size_t, size_t *, size_t *);
};
static struct driver d;
// The loaded driver, for what is resolved by name on first use: the generic calls and the
// families' tables (families.c).
static void *driver_handle;

void *gc_driver_lib(void) { return driver_handle; }

int gc_driver_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	// Resolve into t and publish only a complete table: a failed load leaves d as it was.
	struct driver t;
	memset(&t, 0, sizeof t);
	REQUIRED_SYMBOLS(GC_DL_RESOLVE)
	t.ctx_create = (CUresult(*)(CUcontext *, unsigned, CUdevice))dlsym(h, "cuCtxCreate_v2");
	t.func_get_param_info =
	    (CUresult(*)(CUfunction, size_t, size_t *, size_t *))dlsym(h, "cuFuncGetParamInfo");
	d = t;
	driver_handle = h;
	return 0;
}

void *gc_driver_sym(const char *name) { return driver_handle ? dlsym(driver_handle, name) : NULL; }

int gc_has_param_info(void) { return d.func_get_param_info != NULL; }

const char *gc_error_name(CUresult r) {
	const char *s = NULL;
	if (d.get_error_name == NULL || d.get_error_name(r, &s) != 0) return NULL;
	return s;
}

CUresult gc_init(void) { return d.init(0); }
CUresult gc_driver_version(int *v) { return d.driver_get_version(v); }
CUresult gc_device_count(int *n) { return d.device_get_count(n); }
CUresult gc_device_get(CUdevice *dev, int ordinal) { return d.device_get(dev, ordinal); }
CUresult gc_device_name(char *name, int len, CUdevice dev) { return d.device_get_name(name, len, dev); }
CUresult gc_device_uuid(unsigned char uuid[16], CUdevice dev) { return d.device_get_uuid(uuid, dev); }
CUresult gc_device_total_mem(size_t *b, CUdevice dev) { return d.device_total_mem(b, dev); }
CUresult gc_device_attribute(int *v, int attr, CUdevice dev) {
	return d.device_get_attribute(v, attr, dev);
}
CUresult gc_device_pci_bus_id(char *id, int len, CUdevice dev) {
	return d.device_get_pci_bus_id(id, len, dev);
}

CUresult gc_ctx_create(CUcontext *ctx, unsigned flags, CUdevice dev, int *primary) {
	*primary = *primary || d.ctx_create == NULL;
	if (*primary) return d.primary_retain(ctx, dev);
	CUresult r = d.ctx_create(ctx, flags, dev);
	if (r != 0) return r;
	// cuCtxCreate pushed the new context on this thread's stack; pop it so no thread keeps it
	// current by accident. Every wrapper below sets it current itself.
	CUcontext popped;
	return d.ctx_pop_current(&popped);
}

CUresult gc_ctx_destroy(CUcontext ctx, CUdevice dev, int primary) {
	return primary ? d.primary_release(dev) : d.ctx_destroy(ctx);
}

// bind makes ctx current unless it already is (cheap either way; the check saves a driver lock).
static CUresult bind(CUcontext ctx) { return gc_bind(ctx); }
CUresult gc_bind(CUcontext ctx) {
	CUcontext cur = NULL;
	if (d.ctx_get_current(&cur) == 0 && cur == ctx) return 0;
	return d.ctx_set_current(ctx);
}

#define BOUND(ctx, call)                                                                           \
	do {                                                                                           \
		CUresult r_ = bind(ctx);                                                                   \
		if (r_ != 0) return r_;                                                                    \
		return call;                                                                               \
	} while (0)

CUresult gc_ctx_synchronize(CUcontext ctx) { BOUND(ctx, d.ctx_synchronize()); }
CUresult gc_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t n) { BOUND(ctx, d.mem_alloc(p, n)); }
CUresult gc_mem_free(CUcontext ctx, CUdeviceptr p) { BOUND(ctx, d.mem_free(p)); }
CUresult gc_mem_get_info(CUcontext ctx, size_t *f, size_t *t) { BOUND(ctx, d.mem_get_info(f, t)); }
CUresult gc_mem_host_alloc(CUcontext ctx, void **p, size_t n) {
	BOUND(ctx, d.mem_host_alloc(p, n, CU_MEMHOSTALLOC_PORTABLE));
}
CUresult gc_mem_host_free(CUcontext ctx, void *p) { BOUND(ctx, d.mem_free_host(p)); }
// Portable and device-mapped: the guest's arena is also what its kernels reach zero-copy
// (gc_mem_host_device_pointer).
CUresult gc_mem_host_register(CUcontext ctx, void *p, size_t n) {
	BOUND(ctx, d.mem_host_register(p, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
}

// gc_mem_host_device_pointer is cuMemHostGetDevicePointer of registered memory, resolved on first
// use (CUDA_ERROR_NOT_SUPPORTED from a driver without it).
CUresult gc_mem_host_device_pointer(CUcontext ctx, CUdeviceptr *dp, void *p) {
	static CUresult (*fn)(CUdeviceptr *, void *, unsigned);
	if (!fn) fn = (CUresult(*)(CUdeviceptr *, void *, unsigned))gc_driver_sym("cuMemHostGetDevicePointer_v2");
	if (!fn) return 801; // CUDA_ERROR_NOT_SUPPORTED
	BOUND(ctx, fn(dp, p, 0));
}
CUresult gc_mem_host_unregister(CUcontext ctx, void *p) { BOUND(ctx, d.mem_host_unregister(p)); }

// gc_stream_set_access_policy is cuStreamSetAttribute(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW),
// resolved on first use. CUstreamAttrValue is a 64-byte union; its window is {void *base_ptr;
// size_t num_bytes; float hitRatio; CUaccessProperty hitProp, missProp}.
CUresult gc_stream_set_access_policy(CUcontext ctx, CUstream s, uint64_t base, uint64_t bytes, float ratio,
                                     unsigned hit, unsigned miss) {
	static CUresult (*fn)(CUstream, int, const void *);
	if (!fn) fn = (CUresult(*)(CUstream, int, const void *))gc_driver_sym("cuStreamSetAttribute");
	if (!fn) return 801; // CUDA_ERROR_NOT_SUPPORTED
	struct {
		void *base;
		size_t bytes;
		float ratio;
		unsigned hit, miss;
		char pad[64 - 28];
	} v = {(void *)(uintptr_t)base, bytes, ratio, hit, miss, {0}};
	BOUND(ctx, fn(s, 1 /* CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW */, &v));
}

// gc_pointer_is_managed is cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_MANAGED), resolved on
// first use.
CUresult gc_pointer_is_managed(CUcontext ctx, unsigned *managed, CUdeviceptr p) {
	static CUresult (*fn)(void *, int, CUdeviceptr);
	if (!fn) fn = (CUresult(*)(void *, int, CUdeviceptr))gc_driver_sym("cuPointerGetAttribute");
	if (!fn) return 801; // CUDA_ERROR_NOT_SUPPORTED
	BOUND(ctx, fn(managed, 8 /* CU_POINTER_ATTRIBUTE_IS_MANAGED */, p));
}

CUresult gc_memcpy_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s, int async) {
	BOUND(ctx, async ? d.memcpy_htod_async(dst, src, n, s) : d.memcpy_htod(dst, src, n));
}
CUresult gc_memcpy_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s, int async) {
	BOUND(ctx, async ? d.memcpy_dtoh_async(dst, src, n, s) : d.memcpy_dtoh(dst, src, n));
}
CUresult gc_memcpy_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async) {
	BOUND(ctx, async ? d.memcpy_dtod_async(dst, src, n, s) : d.memcpy_dtod(dst, src, n));
}
// cuMemcpyPeer names both contexts, so none needs to be current.
CUresult gc_memcpy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
	return d.memcpy_peer(dst, dctx, src, sctx, n);
}

CUresult gc_memset(CUcontext ctx, CUdeviceptr dst, unsigned v, int elem, size_t count, CUstream s, int async) {
	CUresult r = bind(ctx);
	if (r != 0) return r;
	switch (elem) {
	case 1: return async ? d.memset_d8_async(dst, (unsigned char)v, count, s) : d.memset_d8(dst, (unsigned char)v, count);
	case 2: return async ? d.memset_d16_async(dst, (unsigned short)v, count, s) : d.memset_d16(dst, (unsigned short)v, count);
	case 4: return async ? d.memset_d32_async(dst, v, count, s) : d.memset_d32(dst, v, count);
	}
	return 1; // CUDA_ERROR_INVALID_VALUE
}

CUresult gc_module_load_data(CUcontext ctx, CUmodule *m, const void *image) {
	BOUND(ctx, d.module_load_data(m, image));
}
CUresult gc_module_unload(CUcontext ctx, CUmodule m) { BOUND(ctx, d.module_unload(m)); }
CUresult gc_module_get_function(CUcontext ctx, CUfunction *f, CUmodule m, const char *name) {
	BOUND(ctx, d.module_get_function(f, m, name));
}
CUresult gc_module_get_global(CUcontext ctx, CUdeviceptr *p, size_t *n, CUmodule m, const char *name) {
	BOUND(ctx, d.module_get_global(p, n, m, name));
}
CUresult gc_func_param_info(CUcontext ctx, CUfunction f, size_t i, size_t *off, size_t *size) {
	if (d.func_get_param_info == NULL) return 801; // CUDA_ERROR_NOT_SUPPORTED
	BOUND(ctx, d.func_get_param_info(f, i, off, size));
}
CUresult gc_func_get_attribute(CUcontext ctx, int *v, int attr, CUfunction f) {
	BOUND(ctx, d.func_get_attribute(v, attr, f));
}
CUresult gc_func_set_attribute(CUcontext ctx, CUfunction f, int attr, int v) {
	BOUND(ctx, d.func_set_attribute(f, attr, v));
}
CUresult gc_ctx_set_limit(CUcontext ctx, int limit, size_t v) { BOUND(ctx, d.ctx_set_limit(limit, v)); }
CUresult gc_ctx_get_limit(CUcontext ctx, size_t *v, int limit) { BOUND(ctx, d.ctx_get_limit(v, limit)); }
CUresult gc_ctx_set_cache_config(CUcontext ctx, int c) { BOUND(ctx, d.ctx_set_cache_config(c)); }
CUresult gc_ctx_get_cache_config(CUcontext ctx, int *c) { BOUND(ctx, d.ctx_get_cache_config(c)); }
CUresult gc_occupancy(CUcontext ctx, int *blocks, CUfunction f, int block, size_t shared, unsigned flags) {
	BOUND(ctx, d.occupancy(blocks, f, block, shared, flags));
}

CUresult gc_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void *params, size_t size) {
	CUresult r = bind(ctx);
	if (r != 0) return r;
	if (size == 0) return d.launch_kernel(f, gx, gy, gz, bx, by, bz, shmem, s, NULL, NULL);
	// The parameters arrive packed per ParamLayout, which is exactly the buffer form the driver
	// takes; it copies the buffer before returning.
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
	                 CU_LAUNCH_PARAM_END};
	return d.launch_kernel(f, gx, gy, gz, bx, by, bz, shmem, s, NULL, extra);
}

CUresult gc_stream_create(CUcontext ctx, CUstream *s, unsigned flags) { BOUND(ctx, d.stream_create(s, flags)); }
CUresult gc_stream_destroy(CUcontext ctx, CUstream s) { BOUND(ctx, d.stream_destroy(s)); }
CUresult gc_stream_synchronize(CUcontext ctx, CUstream s) { BOUND(ctx, d.stream_synchronize(s)); }
CUresult gc_stream_query(CUcontext ctx, CUstream s) { BOUND(ctx, d.stream_query(s)); }
CUresult gc_stream_wait_event(CUcontext ctx, CUstream s, CUevent e) {
	BOUND(ctx, d.stream_wait_event(s, e, 0));
}

CUresult gc_event_create(CUcontext ctx, CUevent *e, unsigned flags) { BOUND(ctx, d.event_create(e, flags)); }
CUresult gc_event_destroy(CUcontext ctx, CUevent e) { BOUND(ctx, d.event_destroy(e)); }
CUresult gc_event_record(CUcontext ctx, CUevent e, CUstream s) { BOUND(ctx, d.event_record(e, s)); }
CUresult gc_event_synchronize(CUcontext ctx, CUevent e) { BOUND(ctx, d.event_synchronize(e)); }
CUresult gc_event_query(CUcontext ctx, CUevent e) { BOUND(ctx, d.event_query(e)); }
CUresult gc_event_elapsed(CUcontext ctx, float *ms, CUevent a, CUevent b) {
	BOUND(ctx, d.event_elapsed_time(ms, a, b));
}

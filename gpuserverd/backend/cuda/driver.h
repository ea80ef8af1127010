// The slice of the CUDA driver API that the cuda backend uses, declared here so gpuserverd builds
// without the CUDA toolkit. Types follow cuda.h (64-bit): handles are opaque pointers and device
// pointers are 64-bit integers. Every entry point is resolved at run time with dlsym.
#ifndef GPUCLOUD_CUDA_DRIVER_H
#define GPUCLOUD_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;

// gc_driver_open loads libname and resolves every entry point. It returns 0, or -1 with err filled
// (the dlerror text or the first missing symbol).
int gc_driver_open(const char *libname, char *err, size_t errlen);
int gc_has_param_info(void);

const char *gc_error_name(CUresult r);
CUresult gc_init(void);
CUresult gc_driver_version(int *v);
CUresult gc_device_count(int *n);
CUresult gc_device_get(CUdevice *d, int ordinal);
CUresult gc_device_name(char *name, int len, CUdevice d);
CUresult gc_device_uuid(unsigned char uuid[16], CUdevice d);
CUresult gc_device_total_mem(size_t *bytes, CUdevice d);
CUresult gc_device_attribute(int *v, int attr, CUdevice d);
CUresult gc_device_pci_bus_id(char *id, int len, CUdevice d);

// gc_ctx_create retains the device's primary context where *primary is set on entry, or where the
// driver has no cuCtxCreate_v2 (then setting *primary); otherwise it creates a context.
CUresult gc_ctx_create(CUcontext *ctx, unsigned flags, CUdevice d, int *primary);
CUresult gc_ctx_destroy(CUcontext ctx, CUdevice d, int primary);
CUresult gc_ctx_synchronize(CUcontext ctx);

// gc_bind makes ctx current on the calling thread (libraries such as cuBLAS then work in it).
CUresult gc_bind(CUcontext ctx);

// Every call below first makes ctx current on the calling OS thread, in the same cgo call, so a
// goroutine that moved threads between calls still talks to its own context.
CUresult gc_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t bytes);
CUresult gc_mem_free(CUcontext ctx, CUdeviceptr p);
CUresult gc_mem_get_info(CUcontext ctx, size_t *free, size_t *total);
CUresult gc_mem_host_alloc(CUcontext ctx, void **p, size_t bytes);
CUresult gc_mem_host_free(CUcontext ctx, void *p);
CUresult gc_mem_host_register(CUcontext ctx, void *p, size_t bytes);
CUresult gc_mem_host_device_pointer(CUcontext ctx, CUdeviceptr *dp, void *p);
CUresult gc_mem_host_unregister(CUcontext ctx, void *p);
CUresult gc_stream_set_access_policy(CUcontext ctx, CUstream s, uint64_t base, uint64_t bytes, float ratio,
                                     unsigned hit, unsigned miss);
CUresult gc_pointer_is_managed(CUcontext ctx, unsigned *managed, CUdeviceptr p);

CUresult gc_memcpy_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s, int async);
CUresult gc_memcpy_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s, int async);
CUresult gc_memcpy_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);
// gc_memcpy_peer is cuMemcpyPeer (synchronous): NVLink or PCIe peer-to-peer where the devices
// have it, the driver's own staging otherwise.
CUresult gc_memcpy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
CUresult gc_memset(CUcontext ctx, CUdeviceptr dst, unsigned value, int elem, size_t count, CUstream s, int async);

CUresult gc_module_load_data(CUcontext ctx, CUmodule *m, const void *image);
CUresult gc_module_unload(CUcontext ctx, CUmodule m);
CUresult gc_module_get_function(CUcontext ctx, CUfunction *f, CUmodule m, const char *name);
CUresult gc_module_get_global(CUcontext ctx, CUdeviceptr *p, size_t *bytes, CUmodule m, const char *name);
CUresult gc_func_param_info(CUcontext ctx, CUfunction f, size_t index, size_t *offset, size_t *size);
CUresult gc_func_get_attribute(CUcontext ctx, int *v, int attr, CUfunction f);
CUresult gc_func_set_attribute(CUcontext ctx, CUfunction f, int attr, int v);
CUresult gc_ctx_set_limit(CUcontext ctx, int limit, size_t v);
CUresult gc_ctx_get_limit(CUcontext ctx, size_t *v, int limit);
CUresult gc_ctx_set_cache_config(CUcontext ctx, int c);
CUresult gc_ctx_get_cache_config(CUcontext ctx, int *c);
CUresult gc_occupancy(CUcontext ctx, int *blocks, CUfunction f, int block, size_t shared, unsigned flags);
CUresult gc_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shmem, CUstream s, void *params, size_t size);

CUresult gc_stream_create(CUcontext ctx, CUstream *s, unsigned flags);
CUresult gc_stream_destroy(CUcontext ctx, CUstream s);
CUresult gc_stream_synchronize(CUcontext ctx, CUstream s);
CUresult gc_stream_query(CUcontext ctx, CUstream s);
CUresult gc_stream_wait_event(CUcontext ctx, CUstream s, CUevent e);

CUresult gc_event_create(CUcontext ctx, CUevent *e, unsigned flags);
CUresult gc_event_destroy(CUcontext ctx, CUevent e);
CUresult gc_event_record(CUcontext ctx, CUevent e, CUstream s);
CUresult gc_event_synchronize(CUcontext ctx, CUevent e);
CUresult gc_event_query(CUcontext ctx, CUevent e);
CUresult gc_event_elapsed(CUcontext ctx, float *ms, CUevent start, CUevent end);

#endif

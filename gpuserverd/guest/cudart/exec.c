/* Execution control beyond cudart.c's launches: host callbacks in stream order, kernel
 * attributes and occupancy, device limits, cache preferences and flags, stream and event
 * queries, driver entry points and the profiler switches. */
#define _GNU_SOURCE
#include "internal.h"

#include <cuda_profiler_api.h>
#include <stddef.h>

#include "../include/gpucloud_private.h"
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

CUresult drain(CUstream s); /* memory2.c */

/* gpucloud's guest driver exports every name NVIDIA's does, some as stubs that only refuse; its
 * private table tells them apart (NULL over NVIDIA's driver, which has no such table). */
static int (*driver_refused(void))(const void *) {
    static const struct gc_private_table *t;
    static int asked;
    if (!__atomic_load_n(&asked, __ATOMIC_ACQUIRE)) {
        static const CUuuid id = {GC_PRIVATE_TABLE_ID};
        const void *p = NULL;
        if (cuGetExportTable(&p, &id) == CUDA_SUCCESS) t = p;
        __atomic_store_n(&asked, 1, __ATOMIC_RELEASE);
    }
    return t && t->size >= offsetof(struct gc_private_table, refused) + sizeof t->refused ? t->refused : NULL;
}

/* A function counts as offered when the driver both serves it by version and exports it by name,
 * and is not one of gpucloud's refusing stubs: the runtime's own fallback then answers. */
void *driver_fn(void **slot, const char *name) {
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn) return fn;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress(name, &fn, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
        st != CU_GET_PROC_ADDRESS_SUCCESS || !dlsym(RTLD_DEFAULT, name))
        return NULL;
    int (*refused)(const void *) = driver_refused();
    if (refused && refused(fn)) return NULL;
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    return fn;
}

/* ---- host functions in stream order: correct, not asynchronous ----
 * The guest library cannot make a stream wait for the host (no host-signalled wait reaches the
 * GPU across the wire), so the function runs here, in the caller's thread, once the stream's
 * earlier work has ended, and the call returns after it: nothing queued on the stream later can
 * start before it returns. The caller blocks meanwhile; a host function that waits for something
 * the same thread does only after enqueueing it would deadlock (NVIDIA's would not). */

EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
    if (!fn) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (cuStreamIsCapturing((CUstream)s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE)
        return ret(cuLaunchHostFunc((CUstream)s, (CUhostFn)fn, data)); /* a host node of the capture */
    CUresult rc = drain((CUstream)s);
    if (rc != CUDA_SUCCESS) return ret(rc); /* as NVIDIA's: not called after an error */
    fn(data);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned flags) {
    if (!cb || flags != 0) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    cudaError_t status = (cudaError_t)drain((CUstream)s);
    cb(s, status, data); /* called with the stream's error, as documented */
    return cudaSuccess;
}

/* ---- kernel attributes and occupancy ---- */

/* cudaFuncAttribute values are CU_FUNC_ATTRIBUTE_* ones (8: max dynamic shared memory). */
EXPORT cudaError_t cudaFuncSetAttribute(const void *host, enum cudaFuncAttribute attr, int value) {
    READY();
    CUfunction f;
    CUresult rc = function(host, &f);
    if (rc == CUDA_SUCCESS) rc = cuFuncSetAttribute(f, (CUfunction_attribute)attr, value);
    return ret(rc);
}

/* On every GPU this runtime serves (Volta on) L1 and shared memory share one store, so a cache
 * preference is the shared-memory carveout the driver takes as the same hint. */
EXPORT cudaError_t cudaFuncSetCacheConfig(const void *host, enum cudaFuncCache c) {
    int carveout;
    switch (c) {
    case cudaFuncCachePreferNone: carveout = -1; break; /* the driver's default */
    case cudaFuncCachePreferShared: carveout = 100; break;
    case cudaFuncCachePreferL1: carveout = 0; break;
    case cudaFuncCachePreferEqual: carveout = 50; break;
    default: return ret(CUDA_ERROR_INVALID_VALUE);
    }
    READY();
    CUfunction f;
    CUresult rc = function(host, &f);
    if (rc == CUDA_SUCCESS) rc = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout);
    return ret(rc);
}

EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *host, int block,
                                                                           size_t shared, unsigned flags) {
    if (!n) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUfunction f;
    CUresult rc = function(host, &f);
    if (rc == CUDA_SUCCESS) rc = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, shared, flags);
    return ret(rc);
}

EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *host, int block, size_t shared) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, host, block, shared, cudaOccupancyDefault);
}

/* ---- device limits, cache preference and flags ---- */

/* cudaLimit and cudaFuncCache values are CUlimit and CUfunc_cache ones. */
EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t v) {
    READY();
    return ret(cuCtxSetLimit((CUlimit)limit, v));
}

EXPORT cudaError_t cudaDeviceGetLimit(size_t *v, enum cudaLimit limit) {
    if (!v) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    return ret(cuCtxGetLimit(v, (CUlimit)limit));
}

EXPORT cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache c) {
    READY();
    return ret(cuCtxSetCacheConfig((CUfunc_cache)c));
}

EXPORT cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *c) {
    if (!c) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUfunc_cache v = CU_FUNC_CACHE_PREFER_NONE;
    CUresult rc = cuCtxGetCacheConfig(&v);
    if (rc == CUDA_SUCCESS) *c = (enum cudaFuncCache)v;
    return ret(rc);
}

/* Device flags are the current device's primary-context flags (cudaDevice* = CU_CTX_*). */
EXPORT cudaError_t cudaSetDeviceFlags(unsigned flags) {
    unsigned sched = flags & cudaDeviceScheduleMask;
    if ((flags & ~(unsigned)cudaDeviceMask) || (sched != cudaDeviceScheduleAuto && sched != cudaDeviceScheduleSpin &&
                                                sched != cudaDeviceScheduleYield && sched != cudaDeviceScheduleBlockingSync))
        return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdevice d;
    CUresult rc = cuDeviceGet(&d, cur_dev);
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxSetFlags(d, flags);
    return ret(rc);
}

EXPORT cudaError_t cudaGetDeviceFlags(unsigned *flags) {
    if (!flags) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdevice d;
    int active;
    CUresult rc = cuDeviceGet(&d, cur_dev);
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxGetState(d, flags, &active);
    return ret(rc);
}

/* ---- stream and event queries ---- */

DRIVER_SLOT(cuStreamGetFlags);
DRIVER_SLOT(cuStreamGetPriority);

struct tracked {
    cudaStream_t s;
    unsigned flags;
    struct tracked *next;
};
static struct tracked *streams;

void stream_track(cudaStream_t s, unsigned flags) {
    struct tracked *t = malloc(sizeof *t);
    if (!t) return; /* only the fallback of cudaStreamGetFlags loses it */
    *t = (struct tracked){s, flags, NULL};
    pthread_mutex_lock(&mu);
    t->next = streams;
    streams = t;
    pthread_mutex_unlock(&mu);
}

void stream_untrack(cudaStream_t s) {
    pthread_mutex_lock(&mu);
    for (struct tracked **t = &streams; *t; t = &(*t)->next)
        if ((*t)->s == s) {
            struct tracked *dead = *t;
            *t = dead->next;
            free(dead);
            break;
        }
    pthread_mutex_unlock(&mu);
}

int stream_flags(cudaStream_t s, unsigned *flags) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (struct tracked *t = streams; t && !found; t = t->next)
        if (t->s == s) *flags = t->flags, found = 1;
    pthread_mutex_unlock(&mu);
    return found;
}

/* The legacy default stream blocks (flags 0); other streams have the flags they were created
 * with, which the driver tells or, without cuStreamGetFlags, this runtime remembers. */
EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned *flags) {
    if (!flags) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult (*f)(CUstream, unsigned *) = DRIVER(CUresult(*)(CUstream, unsigned *), cuStreamGetFlags);
    if (f) return ret(f((CUstream)s, flags));
    if (!s) return *flags = 0, cudaSuccess;
    /* A stream made through the driver API directly is one this runtime cannot tell about. */
    return stream_flags(s, flags) ? cudaSuccess : ret(CUDA_ERROR_NOT_SUPPORTED);
}

/* Without cuStreamGetPriority, every stream's priority is 0: the whole range
 * cudaDeviceGetStreamPriorityRange reports, which creation clamps to. */
EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int *prio) {
    if (!prio) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult (*f)(CUstream, int *) = DRIVER(CUresult(*)(CUstream, int *), cuStreamGetPriority);
    if (f) return ret(f((CUstream)s, prio));
    unsigned flags;
    if (s && !stream_flags(s, &flags)) return ret(CUDA_ERROR_NOT_SUPPORTED);
    *prio = 0;
    return cudaSuccess;
}

/* cudaEventRecordExternal only changes what a stream capture records; this runtime captures
 * nothing (no graphs), so outside one it is a plain record, as NVIDIA's is. */
EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags) {
    if (flags & ~(unsigned)cudaEventRecordExternal) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    return ret(cuEventRecord((CUevent)e, (CUstream)s));
}

/* ---- driver entry points ---- */

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *status) {
    if (!symbol || !fn) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = cuGetProcAddress(symbol, fn, (int)version, flags, &st);
    if (status) *status = (enum cudaDriverEntryPointQueryResult)st; /* same numbers */
    return ret(rc);
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *status) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}

/* ---- profiler switches ----
 * They start and stop collection by the profiling tool attached to the process, and change
 * nothing else. A guest has no such tool (tools attach to the driver, which runs on the host),
 * so with a driver that does not offer them there is nothing to switch and they succeed, as
 * NVIDIA's do with no tool attached. */

DRIVER_SLOT(cuProfilerStart);
DRIVER_SLOT(cuProfilerStop);

EXPORT cudaError_t cudaProfilerStart(void) {
    READY();
    CUresult (*f)(void) = DRIVER(CUresult(*)(void), cuProfilerStart);
    return ret(f ? f() : CUDA_SUCCESS);
}

EXPORT cudaError_t cudaProfilerStop(void) {
    READY();
    CUresult (*f)(void) = DRIVER(CUresult(*)(void), cuProfilerStop);
    return ret(f ? f() : CUDA_SUCCESS);
}

/* ---- for the generated functions over the driver API (stubs_gen.c) ---- */
int gc_rt_ready(void) { return (int)ready(); }
int gc_rt_result(int rc) { return (int)ret((CUresult)rc); }

/* Pitched 2-D memory, host registration, pointer queries, stream-ordered allocation and copies
 * between devices: the runtime's memory calls beyond cudart.c's basics. */
#define _GNU_SOURCE
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_INVALID_PITCH 12 /* cudaErrorInvalidPitchValue: the driver has no such code */

/* drain waits for the work queued so far on s; for the legacy default stream that is every
 * blocking stream's too, so the whole context is waited for. */
CUresult drain(CUstream s) { return s ? cuStreamSynchronize(s) : cuCtxSynchronize(); }

/* ---- 2-D ---- */

EXPORT cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    if (!p || !pitch) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdeviceptr d = 0;
    /* 16: the widest element a kernel reads, so every row is aligned for it. */
    CUresult rc = cuMemAllocPitch(&d, pitch, width, height, 16);
    *p = (void *)(uintptr_t)d;
    return ret(rc);
}

/* side fills one side of a 2-D copy from a runtime copy kind. */
static void side(int device, int unified, const void *p, size_t pitch, CUmemorytype *type, const void **host,
                 CUdeviceptr *dev, size_t *out_pitch) {
    *out_pitch = pitch;
    if (unified) {
        *type = CU_MEMORYTYPE_UNIFIED; /* the driver tells host from device by address */
        *dev = (CUdeviceptr)(uintptr_t)p;
    } else if (device) {
        *type = CU_MEMORYTYPE_DEVICE;
        *dev = (CUdeviceptr)(uintptr_t)p;
    } else {
        *type = CU_MEMORYTYPE_HOST;
        *host = p;
    }
}

static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                          enum cudaMemcpyKind kind, CUstream s, int async) {
    if (height > 1 && (width > dpitch || width > spitch)) return ret((CUresult)ERROR_INVALID_PITCH);
    if (width == 0 || height == 0) return cudaSuccess;
    int sd, dd, unified = kind == cudaMemcpyDefault;
    switch (kind) {
    case cudaMemcpyHostToHost: sd = 0, dd = 0; break;
    case cudaMemcpyHostToDevice: sd = 0, dd = 1; break;
    case cudaMemcpyDeviceToHost: sd = 1, dd = 0; break;
    case cudaMemcpyDeviceToDevice: sd = 1, dd = 1; break;
    case cudaMemcpyDefault: sd = 1, dd = 1; break;
    default: return ret(CUDA_ERROR_INVALID_VALUE);
    }
    READY();
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    side(sd, unified, src, spitch, &c.srcMemoryType, &c.srcHost, &c.srcDevice, &c.srcPitch);
    const void *dhost = NULL;
    side(dd, unified, dst, dpitch, &c.dstMemoryType, &dhost, &c.dstDevice, &c.dstPitch);
    c.dstHost = (void *)dhost;
    c.WidthInBytes = width;
    c.Height = height;
    return ret(async ? cuMemcpy2DAsync(&c, s) : cuMemcpy2D(&c));
}

EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height, enum cudaMemcpyKind kind) {
    return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0);
}

EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    return copy2d(dst, dpitch, src, spitch, width, height, kind, (CUstream)s, 1);
}

EXPORT cudaError_t cudaMemset2D(void *p, size_t pitch, int v, size_t width, size_t height) {
    if (height > 1 && width > pitch) return ret((CUresult)ERROR_INVALID_PITCH);
    READY();
    return ret(cuMemsetD2D8((CUdeviceptr)(uintptr_t)p, pitch, (unsigned char)v, width, height));
}

EXPORT cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
    if (height > 1 && width > pitch) return ret((CUresult)ERROR_INVALID_PITCH);
    READY();
    return ret(cuMemsetD2D8Async((CUdeviceptr)(uintptr_t)p, pitch, (unsigned char)v, width, height, (CUstream)s));
}

/* ---- page-locked host memory ---- */

struct range {
    uintptr_t base;
    size_t n;
    struct range *next;
};
static struct range *ranges;

void host_track(void *p, size_t n) {
    struct range *r = malloc(sizeof *r);
    if (!r) return; /* only cudaPointerGetAttributes' fallback loses it */
    *r = (struct range){(uintptr_t)p, n, NULL};
    pthread_mutex_lock(&mu);
    r->next = ranges;
    ranges = r;
    pthread_mutex_unlock(&mu);
}

void host_untrack(void *p) {
    pthread_mutex_lock(&mu);
    for (struct range **r = &ranges; *r; r = &(*r)->next)
        if ((*r)->base == (uintptr_t)p) {
            struct range *dead = *r;
            *r = dead->next;
            free(dead);
            break;
        }
    pthread_mutex_unlock(&mu);
}

int host_find(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int found = 0;
    pthread_mutex_lock(&mu);
    for (struct range *r = ranges; r && !found; r = r->next) found = a >= r->base && a - r->base < r->n;
    pthread_mutex_unlock(&mu);
    return found;
}

DRIVER_SLOT(cuMemHostRegister);
DRIVER_SLOT(cuMemHostUnregister);
DRIVER_SLOT(cuMemHostGetDevicePointer);
DRIVER_SLOT(cuMemHostGetFlags);
DRIVER_SLOT(cuPointerGetAttributes);

EXPORT cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
    READY();
    CUresult (*f)(void *, size_t, unsigned) = DRIVER(CUresult(*)(void *, size_t, unsigned), cuMemHostRegister);
    if (!f) return ret(CUDA_ERROR_NOT_SUPPORTED);
    CUresult rc = f(p, n, flags); /* cudaHostRegister* flags are CU_MEMHOSTREGISTER_* */
    if (rc == CUDA_SUCCESS) host_track(p, n);
    return ret(rc);
}

EXPORT cudaError_t cudaHostUnregister(void *p) {
    READY();
    CUresult (*f)(void *) = DRIVER(CUresult(*)(void *), cuMemHostUnregister);
    if (!f) return ret(CUDA_ERROR_NOT_SUPPORTED);
    CUresult rc = f(p);
    if (rc == CUDA_SUCCESS) host_untrack(p);
    return ret(rc);
}

EXPORT cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags) {
    if (!dev) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult (*f)(CUdeviceptr *, void *, unsigned) =
        DRIVER(CUresult(*)(CUdeviceptr *, void *, unsigned), cuMemHostGetDevicePointer);
    if (!f) return ret(CUDA_ERROR_NOT_SUPPORTED);
    CUdeviceptr d = 0;
    CUresult rc = f(&d, host, flags);
    if (rc == CUDA_SUCCESS) *dev = (void *)(uintptr_t)d;
    return ret(rc);
}

EXPORT cudaError_t cudaHostGetFlags(unsigned *flags, void *host) {
    if (!flags) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult (*f)(unsigned *, void *) = DRIVER(CUresult(*)(unsigned *, void *), cuMemHostGetFlags);
    if (!f) return ret(CUDA_ERROR_NOT_SUPPORTED);
    return ret(f(flags, host));
}

/* CUpointer_attribute values (cuda.h's enum, which the guest's header does not declare). */
enum { PA_MEMORY_TYPE = 2, PA_DEVICE_POINTER = 3, PA_HOST_POINTER = 4, PA_IS_MANAGED = 8, PA_DEVICE_ORDINAL = 9 };

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    if (!a) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    memset(a, 0, sizeof *a);
    CUresult (*f)(unsigned, int *, void **, CUdeviceptr) =
        DRIVER(CUresult(*)(unsigned, int *, void **, CUdeviceptr), cuPointerGetAttributes);
    if (f) {
        int attrs[] = {PA_MEMORY_TYPE, PA_DEVICE_POINTER, PA_HOST_POINTER, PA_IS_MANAGED, PA_DEVICE_ORDINAL};
        unsigned type = 0;
        CUdeviceptr dp = 0;
        void *hp = NULL;
        int managed = 0, ordinal = -1;
        void *data[] = {&type, &dp, &hp, &managed, &ordinal};
        CUresult rc = f(5, attrs, data, (CUdeviceptr)(uintptr_t)p);
        if (rc != CUDA_SUCCESS) return ret(rc);
        a->type = managed                           ? cudaMemoryTypeManaged
                  : type == CU_MEMORYTYPE_DEVICE    ? cudaMemoryTypeDevice
                  : type == CU_MEMORYTYPE_HOST      ? cudaMemoryTypeHost
                                                    : cudaMemoryTypeUnregistered;
        if (a->type == cudaMemoryTypeUnregistered && host_find(p)) { /* a driver that tracks no host memory */
            a->type = cudaMemoryTypeHost, ordinal = cur_dev, hp = (void *)p;
        }
        a->device = a->type == cudaMemoryTypeUnregistered ? -2 : ordinal; /* -2: no device's */
        a->devicePointer = (void *)(uintptr_t)dp;
        a->hostPointer = hp;
        return cudaSuccess;
    }
    /* A driver without pointer queries (the guest library): device memory is what the driver's
     * allocation table knows, page-locked memory what this runtime handed out or registered. */
    CUdeviceptr base = 0;
    size_t size = 0;
    if (cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS) {
        a->type = cudaMemoryTypeDevice;
        a->device = cur_dev;
        a->devicePointer = (void *)p;
    } else if (host_find(p)) {
        a->type = cudaMemoryTypeHost;
        a->device = cur_dev;
        a->hostPointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2; /* no device's */
    }
    return cudaSuccess;
}

/* ---- stream-ordered allocation: correct, not asynchronous ---- */

/* The allocation is usable at once, so by the stream's later work too. */
/* Stream-ordered allocation from the device's current pool (charged to a session's quota by
 * gpuserverd until freed). */
EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    return ret(cuMemAllocAsync((CUdeviceptr *)p, n, (CUstream)s));
}

/* A stream-ordered free; memory from cudaMalloc may be freed so too: then the free must not take
 * effect before the stream's earlier work (which may still use the memory) ends, so the stream is
 * waited for, then the memory freed. */
EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    if (!p) return cudaSuccess;
    READY();
    CUresult rc = cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, (CUstream)s);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
        rc = drain((CUstream)s);
        if (rc == CUDA_SUCCESS) rc = cuMemFree((CUdeviceptr)(uintptr_t)p);
    }
    return ret(rc);
}

/* ---- peers: access and copies between a session's devices, over the driver API ---- */

static cudaError_t check_devices(int a, int b) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return e;
    if (a < 0 || a >= n || b < 0 || b >= n) return ret(CUDA_ERROR_INVALID_DEVICE);
    return cudaSuccess;
}

/* peer_copy copies n bytes from device sd to device dd with the driver's cuMemcpyPeer (the worker
 * copies between its contexts; the bytes never come through the guest), once both devices'
 * earlier work has ended: a peer copy is ordered after all work queued before it on either
 * device, and ends before this returns. */
static CUresult peer_copy(CUdeviceptr dst, int dd, CUdeviceptr src, int sd, size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    CUcontext sc, dc;
    CUresult rc = device_context(sd, &sc);
    if (rc == CUDA_SUCCESS) rc = device_context(dd, &dc);
    if (rc != CUDA_SUCCESS) return rc;
    CUcontext ctxs[2] = {sc, dc};
    for (int i = 0; i < 2 && rc == CUDA_SUCCESS; i++) {
        rc = cuCtxPushCurrent(ctxs[i]);
        if (rc != CUDA_SUCCESS) break;
        rc = cuCtxSynchronize();
        if (rc == CUDA_SUCCESS && i == 1) rc = cuMemcpyPeer(dst, dc, src, sc, n);
        cuCtxPopCurrent(NULL);
    }
    return rc;
}

EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
    cudaError_t e = check_devices(dd, sd);
    if (e != cudaSuccess) return e;
    READY();
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    return ret(dd == sd ? cuMemcpyDtoD(d, s, n) : peer_copy(d, dd, s, sd, n));
}

/* Between two devices the copy is the synchronous one after the stream's earlier work: correct
 * (nothing queued later on the stream starts before it ends), not asynchronous. */
EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s) {
    cudaError_t e = check_devices(dd, sd);
    if (e != cudaSuccess) return e;
    READY();
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    if (dd == sd) return ret(cuMemcpyDtoDAsync(d, sp, n, (CUstream)s));
    CUresult rc = drain((CUstream)s);
    if (rc == CUDA_SUCCESS) rc = peer_copy(d, dd, sp, sd, n);
    return ret(rc);
}

EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
    if (!can) return ret(CUDA_ERROR_INVALID_VALUE);
    cudaError_t e = check_devices(d, peer);
    if (e != cudaSuccess) return e;
    return ret(cuDeviceCanAccessPeer(can, d, peer));
}

/* peer_access enables or disables the current device's access to peer's memory (its primary
 * context's), as cuCtxEnablePeerAccess does. */
static cudaError_t peer_access(int peer, unsigned flags, int enable) {
    cudaError_t e = check_devices(peer, peer);
    if (e != cudaSuccess) return e;
    READY();
    CUcontext pc;
    CUresult rc = device_context(peer, &pc);
    if (rc == CUDA_SUCCESS) rc = enable ? cuCtxEnablePeerAccess(pc, flags) : cuCtxDisablePeerAccess(pc);
    return ret(rc);
}

EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) { return peer_access(peer, flags, 1); }
EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer) { return peer_access(peer, 0, 0); }

/* Managed memory: the driver's (driver/managed.c: one copy in the shared arena, addressed alike by
 * the program and the device; elsewhere kept coherent by software, driver/coherence.c).
 * Prefetches, advice and attachment are hints. */
EXPORT cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdeviceptr d = 0;
    CUresult rc = cuMemAllocManaged(&d, n, flags); /* cudaMemAttach* are CU_MEM_ATTACH_* */
    if (rc == CUDA_SUCCESS) *p = (void *)(uintptr_t)d;
    return ret(rc);
}

EXPORT cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t s) {
    (void)loc, (void)flags;
    READY();
    return ret(cuStreamAttachMemAsync((CUstream)s, (CUdeviceptr)(uintptr_t)p, n, 0)); /* the same check: a hint */
}

EXPORT cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation loc) {
    (void)advice, (void)loc;
    READY();
    return ret(cuStreamAttachMemAsync(NULL, (CUdeviceptr)(uintptr_t)p, n, 0)); /* the same check: a hint */
}

EXPORT cudaError_t cudaStreamAttachMemAsync(cudaStream_t s, void *p, size_t n, unsigned flags) {
    READY();
    if (flags != 0x1 && flags != 0x2 && flags != 0x4) /* cudaMemAttachGlobal, Host, Single */
        return ret(CUDA_ERROR_INVALID_VALUE);
    /* A hint, but the stream tells software coherence which work a CPU access waits for. */
    return ret(cuStreamAttachMemAsync((CUstream)s, (CUdeviceptr)(uintptr_t)p, n, flags));
}

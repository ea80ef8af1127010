/* Device and host memory, copies and memsets. Host-to-device data goes out in chunks the server
 * stages through pinned buffers; device-to-host data comes back the same way, straight into the
 * caller's buffer. */
#include "guest.h"
#include "graphhost.h"

#include "driver/coherence.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation tracking ---- */

struct range {
    CUdeviceptr base;
    size_t size;
};
static struct range *ranges;
static size_t nranges, cranges;
static pthread_mutex_t ranges_mu = PTHREAD_MUTEX_INITIALIZER;

void gc_track_alloc(CUdeviceptr p, size_t n) {
    pthread_mutex_lock(&ranges_mu);
    if (nranges == cranges) {
        size_t c = cranges ? 2 * cranges : 64;
        struct range *r = realloc(ranges, c * sizeof *r);
        if (!r) goto out;
        ranges = r;
        cranges = c;
    }
    ranges[nranges++] = (struct range){p, n};
out:
    pthread_mutex_unlock(&ranges_mu);
}

void gc_untrack_alloc(CUdeviceptr p) {
    pthread_mutex_lock(&ranges_mu);
    for (size_t i = 0; i < nranges; i++)
        if (ranges[i].base == p) {
            ranges[i] = ranges[--nranges];
            break;
        }
    pthread_mutex_unlock(&ranges_mu);
}

int gc_find_alloc(CUdeviceptr p, CUdeviceptr *base, size_t *size) {
    int found = 0;
    pthread_mutex_lock(&ranges_mu);
    for (size_t i = 0; i < nranges && !found; i++)
        if (p >= ranges[i].base && p - ranges[i].base < ranges[i].size + (ranges[i].size == 0)) {
            if (base) *base = ranges[i].base;
            if (size) *size = ranges[i].size;
            found = 1;
        }
    pthread_mutex_unlock(&ranges_mu);
    return found || gc_graph_range(p, base, size); /* graph memory (graphextras.c) */
}

/* The per-thread default stream (CU_STREAM_PER_THREAD, and a NULL stream in the _ptsz calls) is
 * named on the wire by this thread's number with GC_PER_THREAD_STREAM set (wire.PerThreadStream);
 * the worker makes the thread's stream on its first use, on whichever device is current. */
#define GC_PER_THREAD_STREAM (1ULL << 63)
static _Atomic uint64_t threads_numbered;
static __thread uint64_t thread_number;

uint64_t gc_stream_handle(CUstream s) {
    uintptr_t v = (uintptr_t)s;
    if (v == (uintptr_t)CU_STREAM_PER_THREAD) {
        if (!thread_number) thread_number = atomic_fetch_add(&threads_numbered, 1) + 1;
        return GC_PER_THREAD_STREAM | thread_number;
    }
    return v <= 2 ? 0 : v >> 8; /* 0 and CU_STREAM_LEGACY: the legacy default stream */
}

int gc_stream_is_per_thread(CUstream s) { return (uintptr_t)s == (uintptr_t)CU_STREAM_PER_THREAD; }

CUstream gc_stream_ptr(uint64_t h) { return (CUstream)(uintptr_t)(h << 8); }

/* ---- allocation ---- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    if (!dptr || bytes == 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_alloc m = {.bytes = bytes};
    GC_ENCODE(mem_alloc, m, b);
    struct gw_handle_reply hr;
    CUresult rc = gc_request(GW_TYPE_MEM_ALLOC, 0, b, b_n, GW_TYPE_HANDLE_REPLY, &hr);
    if (rc == CUDA_SUCCESS) {
        *dptr = hr.handle;
        gc_track_alloc(hr.handle, bytes);
    }
    return GC_T(rc);
}
ALIAS(cuMemAlloc, cuMemAlloc_v2);

/* PITCH_ALIGN is the row alignment of pitched allocations: what NVIDIA's driver gives on recent
 * GPUs, so every row starts where coalesced and texture access want it. */
#define PITCH_ALIGN 512

/* cuMemAllocPitch is a plain allocation of height rows padded to PITCH_ALIGN: the pitch is the
 * guest's choice, the server needs no message of its own. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem) {
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (width > SIZE_MAX - PITCH_ALIGN) return GC_T(CUDA_ERROR_INVALID_VALUE);
    size_t p = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (height > SIZE_MAX / p) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    CUresult rc = cuMemAlloc_v2(dptr, p * height);
    if (rc == CUDA_SUCCESS) *pitch = p;
    return GC_T(rc);
}
ALIAS(cuMemAllocPitch, cuMemAllocPitch_v2);

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    int kind = 0; /* mapped host memory kept coherent is freed by cuMemFreeHost, as it was allocated */
    if (p && gc_coh_find((void *)(uintptr_t)p, 0, &kind) && kind == GC_COH_MAPPED_HOST) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (p == 0 || gc_managed_free(p)) return GC_T(CUDA_SUCCESS);
    struct gw_mem_free m = {.ptr = p};
    GC_ENCODE(mem_free, m, b);
    CUresult rc = gc_call_status(GW_TYPE_MEM_FREE, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_untrack_alloc(p);
    return GC_T(rc);
}
ALIAS(cuMemFree, cuMemFree_v2);

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    if (!free || !total) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_get_info m = {0};
    GC_ENCODE(mem_get_info, m, b);
    struct gw_mem_get_info_reply mr;
    CUresult rc = gc_request(GW_TYPE_MEM_GET_INFO, 0, b, b_n, GW_TYPE_MEM_GET_INFO_REPLY, &mr);
    if (rc == CUDA_SUCCESS) {
        *free = mr.free;
        *total = mr.total;
    }
    return GC_T(rc);
}
ALIAS(cuMemGetInfo, cuMemGetInfo_v2);

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    return GC_T(gc_find_alloc(p, pbase, psize) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}
ALIAS(cuMemGetAddressRange, cuMemGetAddressRange_v2);

/* Host "pinned" memory comes from the shared arena when the session has one (the worker has
 * registered it with the driver: copies from and to it are one DMA). Otherwise, and when the
 * arena is full, memory the device must reach itself (CU_MEMHOSTALLOC_DEVICEMAP) is device memory
 * kept coherent with the program's pages at the same address (coherence.c), so that its device
 * pointer is its host pointer, as on UVA; plain pinned memory is host memory at reserved device
 * addresses, which becomes the same once a kernel may see it (coh_pinned.c). Copies with it go
 * through the socket as any host memory's until then: the server's staging buffers are the
 * pinned ones. */
EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned flags) {
    if (!pp || bytes == 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    if ((*pp = gc_shm_alloc(bytes)) != NULL) return GC_T(CUDA_SUCCESS);
    if (flags & CU_MEMHOSTALLOC_DEVICEMAP) return GC_T(gc_coh_alloc(pp, bytes, GC_COH_MAPPED_HOST));
    /* Plain pinned memory: device addresses reserved, given device memory if a kernel may see it
     * (coh_pinned.c); ordinary memory where even that cannot be had. */
    if (gc_coh_alloc(pp, bytes, GC_COH_PINNED) == CUDA_SUCCESS) return GC_T(CUDA_SUCCESS);
    return GC_T(posix_memalign(pp, 4096, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }
ALIAS(cuMemAllocHost, cuMemAllocHost_v2);

EXPORT CUresult cuMemFreeHost(void *p) {
    int kind = 0; /* managed memory is freed by cuMemFree */
    if (gc_coh_find(p, 0, &kind) && kind == GC_COH_MANAGED) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!gc_shm_free(p) && !gc_coh_free(p, GC_COH_MAPPED_HOST)) free(p);
    return GC_T(CUDA_SUCCESS);
}

/* ---- copies ---- */

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async) {
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    if (n > 0 && !src) return CUDA_ERROR_INVALID_VALUE;
    /* Coherent memory's address is a device address: the device's copy, made current, is read. */
    if (n > 0 && gc_coh_find(src, n, NULL)) return dtod(dst, (CUdeviceptr)(uintptr_t)src, n, s, async);
    if ((rc = gc_coh_before(GW_TYPE_MEMCPY_HTO_D)) != CUDA_SUCCESS) return rc;
    uint64_t a; /* captured: arena memory is a device side the graph reaches at replay */
    if (gc_is_capturing(s) && gc_arena_device_addr(src, n, &a)) return cuMemcpyDtoDAsync_v2(dst, a, n, s);
    if (gc_graphhost_capturing(s, &a)) return gc_graphhost_capture_copy(1, s, a, dst, (void *)src, n); /* a bounce */
    if (n > GW_STRIPE_CHUNK) gc_lanes_reopen(); /* after a resume or a move */
    pthread_mutex_lock(&gc.mu);
    rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS && gc_shm_on()) {
        rc = gc_shm_copy_locked(1, dst, (void *)src, n, gc_stream_handle(s), async);
        pthread_mutex_unlock(&gc.mu);
        return rc;
    }
    if (rc == CUDA_SUCCESS && gc_lanes() >= 2 && n > GW_STRIPE_CHUNK) {
        struct gw_memcpy_hto_d_striped m = {.dst = dst, .bytes = n, .stream = gc_stream_handle(s),
                                            .async = (uint32_t)async, .lanes = (uint32_t)gc_lanes()};
        uint8_t b[64];
        gw_memcpy_hto_d_striped_encode(&m, b);
        rc = gc_striped_locked(GW_TYPE_MEMCPY_HTO_D_STRIPED, b, gw_memcpy_hto_d_striped_size(&m), (char *)src, n, 0);
        if (rc != (CUresult)GW_STRIPE_RETRY) {
            pthread_mutex_unlock(&gc.mu);
            return rc;
        }
        rc = CUDA_SUCCESS; /* the session moved: the copy goes unstriped */
    }
    size_t off = 0;
    struct gc_reply r;
    while (rc == CUDA_SUCCESS) {
        size_t chunk = n - off < GW_MAX_CHUNK ? n - off : GW_MAX_CHUNK;
        int last = off + chunk == n;
        struct gw_memcpy_hto_d m = {.dst = dst + off, .stream = gc_stream_handle(s), .async = (uint32_t)async,
                                    .data = (const char *)src + off, .data_len = (uint32_t)chunk};
        uint8_t head[32];
        uint8_t *end = gw_memcpy_hto_d_encode_head(&m, head);
        uint16_t flags = (async || !last) ? GW_FLAG_NO_REPLY : 0;
        rc = gc_xfer_locked(GW_TYPE_MEMCPY_HTO_D, flags, head, end - head, m.data, chunk, GW_TYPE_STATUS, &r);
        off += chunk;
        if (last) break;
    }
    if (rc == CUDA_SUCCESS && !async) {
        struct gw_status st;
        char err[128];
        rc = gw_status_decode(&st, r.p, r.n, err, sizeof err) == 0 ? (CUresult)st.result : gc_transport_error(err);
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

/* dtoh always waits for the data (an async copy to host memory must land somewhere the caller
 * owns; finishing early is within CUDA's contract). */
static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    if (n > 0 && !dst) return CUDA_ERROR_INVALID_VALUE;
    if (n > 0 && gc_coh_find(dst, n, NULL)) return dtod((CUdeviceptr)(uintptr_t)dst, src, n, s, async);
    if ((rc = gc_coh_before(GW_TYPE_MEMCPY_DTO_H)) != CUDA_SUCCESS) return rc;
    uint64_t a;
    if (gc_is_capturing(s) && gc_arena_device_addr(dst, n, &a)) return cuMemcpyDtoDAsync_v2(a, src, n, s);
    if (gc_graphhost_capturing(s, &a)) return gc_graphhost_capture_copy(0, s, a, src, dst, n); /* a bounce */
    struct gw_memcpy_dto_h m = {.src = src, .bytes = n, .stream = gc_stream_handle(s), .async = (uint32_t)async};
    GC_ENCODE(memcpy_dto_h, m, b);
    if (n > GW_STRIPE_CHUNK) gc_lanes_reopen(); /* after a resume or a move */
    pthread_mutex_lock(&gc.mu);
    rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS && gc_shm_on()) {
        rc = gc_shm_copy_locked(0, src, dst, n, gc_stream_handle(s), async);
        pthread_mutex_unlock(&gc.mu);
        return rc;
    }
    if (rc == CUDA_SUCCESS && gc_lanes() >= 2 && n > GW_STRIPE_CHUNK) {
        struct gw_memcpy_dto_h_striped ms = {.src = src, .bytes = n, .stream = gc_stream_handle(s),
                                             .async = (uint32_t)async, .lanes = (uint32_t)gc_lanes()};
        uint8_t bs[64];
        gw_memcpy_dto_h_striped_encode(&ms, bs);
        rc = gc_striped_locked(GW_TYPE_MEMCPY_DTO_H_STRIPED, bs, gw_memcpy_dto_h_striped_size(&ms), dst, n, 1);
        if (rc != (CUresult)GW_STRIPE_RETRY) {
            pthread_mutex_unlock(&gc.mu);
            return rc;
        }
        rc = CUDA_SUCCESS; /* the session moved: the copy goes unstriped */
    }
    if (rc == CUDA_SUCCESS) rc = gc_xfer_locked(GW_TYPE_MEMCPY_DTO_H, 0, b, b_n, NULL, 0, 0, NULL);
    size_t off = 0;
    while (rc == CUDA_SUCCESS) {
        uint8_t h[GW_HEADER_SIZE + 8];
        if (gc_read_header_locked(h) != 0 || gc_read_full(h + GW_HEADER_SIZE, 8) != 0) {
            rc = gc_transport_error("reading copied data");
            break;
        }
        uint32_t len = gw_u32_at(h, 0), type = h[4] | h[5] << 8, flags = h[6] | h[7] << 8;
        int32_t result = (int32_t)gw_u32_at(h, 3);
        uint32_t dlen = gw_u32_at(h, 4);
        if (type != GW_TYPE_MEMCPY_DTO_H_DATA || len != 8 + dlen || dlen > n - off) {
            rc = gc_transport_error("malformed MemcpyDtoHData frame");
            break;
        }
        if (gc_read_full((char *)dst + off, dlen) != 0) {
            rc = gc_transport_error("reading copied data");
            break;
        }
        off += dlen;
        if (!(flags & GW_FLAG_MORE)) {
            rc = (CUresult)result;
            if (rc == CUDA_SUCCESS && off != n) rc = gc_transport_error("short device-to-host copy");
            break;
        }
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    struct gw_memcpy_dto_d m = {.dst = dst, .src = src, .bytes = n, .stream = gc_stream_handle(s), .async = (uint32_t)async};
    GC_ENCODE(memcpy_dto_d, m, b);
    return gc_call_status(GW_TYPE_MEMCPY_DTO_D, async ? GW_FLAG_NO_REPLY : 0, b, b_n);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return htod(dst, src, n, NULL, 0); }
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, NULL, 0); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, NULL, 0); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return htod(dst, src, n, s, 1); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { return dtoh(dst, src, n, s, 1); }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return dtod(dst, src, n, s, 1); }
ALIAS(cuMemcpyHtoD, cuMemcpyHtoD_v2);
ALIAS(cuMemcpyDtoH, cuMemcpyDtoH_v2);
ALIAS(cuMemcpyDtoD, cuMemcpyDtoD_v2);
ALIAS(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
ALIAS(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
ALIAS(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);

/* Unified addressing: a pointer inside a device allocation is device memory, any other is host. */
static CUresult any_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    int dd = gc_find_alloc(dst, NULL, NULL), sd = gc_find_alloc(src, NULL, NULL);
    if (dd && sd) return dtod(dst, src, n, s, async);
    if (dd) return htod(dst, (const void *)(uintptr_t)src, n, s, async);
    if (sd) return dtoh((void *)(uintptr_t)dst, src, n, s, async);
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return any_copy(dst, src, n, NULL, 0); }
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return any_copy(dst, src, n, s, 1); }

/* ---- memsets ---- */

static CUresult memset_n(CUdeviceptr dst, uint32_t v, uint32_t elem, size_t count, CUstream s, int async) {
    struct gw_memset m = {.dst = dst, .value = v, .elem_size = elem, .count = count, .stream = gc_stream_handle(s), .async = (uint32_t)async};
    GC_ENCODE(memset, m, b);
    return gc_call_status(GW_TYPE_MEMSET, async ? GW_FLAG_NO_REPLY : 0, b, b_n);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_n(d, v, 1, n, NULL, 0); }
EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_n(d, v, 2, n, NULL, 0); }
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_n(d, v, 4, n, NULL, 0); }
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_n(d, v, 1, n, s, 1); }
EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return memset_n(d, v, 2, n, s, 1); }
EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_n(d, v, 4, n, s, 1); }
ALIAS(cuMemsetD8, cuMemsetD8_v2);
ALIAS(cuMemsetD16, cuMemsetD16_v2);
ALIAS(cuMemsetD32, cuMemsetD32_v2);

/* ---- 2-D copies and memsets: one row at a time, rows sent without waiting, then one sync ---- */

/* address of row r of one side of a 2-D copy; *dev says whether it is device memory. */
static CUresult side(CUmemorytype t, const void *host, CUdeviceptr devp, CUarray arr, size_t x, size_t y,
                     size_t pitch, size_t r, uintptr_t *addr, int *dev) {
    if (arr || t == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED; /* arrays are not forwarded yet */
    uintptr_t base;
    switch (t) {
    case CU_MEMORYTYPE_HOST: base = (uintptr_t)host; *dev = 0; break;
    case CU_MEMORYTYPE_DEVICE: base = devp; *dev = 1; break;
    case CU_MEMORYTYPE_UNIFIED: base = devp; *dev = gc_find_alloc(devp, NULL, NULL); break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    *addr = base + (y + r) * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return gc_copy2d_arrays(c, s, async); /* driver/array.c */
    if ((c->Height > 1 && (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes))) return CUDA_ERROR_INVALID_VALUE;
    int dev, touched_device = 0;
    CUresult rc = gc_current_device(&dev);
    for (size_t r = 0; rc == CUDA_SUCCESS && r < c->Height; r++) {
        uintptr_t src, dst;
        int sd, dd;
        rc = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcPitch, r, &src, &sd);
        if (rc == CUDA_SUCCESS)
            rc = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstPitch, r, &dst, &dd);
        if (rc != CUDA_SUCCESS) break;
        touched_device |= sd | dd;
        if (sd && dd) rc = dtod(dst, src, c->WidthInBytes, s, 1);
        else if (dd) rc = htod(dst, (const void *)src, c->WidthInBytes, s, 1);
        else if (sd) rc = dtoh((void *)dst, src, c->WidthInBytes, s, 1);
        else memmove((void *)dst, (const void *)src, c->WidthInBytes);
    }
    if (rc == CUDA_SUCCESS && !async && touched_device) rc = cuStreamSynchronize(s);
    return rc;
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s, 1); }
ALIAS(cuMemcpy2D, cuMemcpy2D_v2);
ALIAS(cuMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2);
ALIAS(cuMemcpy2DAsync, cuMemcpy2DAsync_v2);

static CUresult memset2d(CUdeviceptr d, size_t pitch, uint32_t v, uint32_t elem, size_t width, size_t height,
                         CUstream s, int async) {
    if (height > 1 && pitch < width * elem) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    for (size_t r = 0; rc == CUDA_SUCCESS && r < height; r++) rc = memset_n(d + r * pitch, v, elem, width, s, 1);
    if (rc == CUDA_SUCCESS && !async) rc = cuStreamSynchronize(s);
    return rc;
}

EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { return memset2d(d, p, v, 1, w, h, NULL, 0); }
EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) { return memset2d(d, p, v, 2, w, h, NULL, 0); }
EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) { return memset2d(d, p, v, 4, w, h, NULL, 0); }
EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) { return memset2d(d, p, v, 1, w, h, s, 1); }
EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) { return memset2d(d, p, v, 2, w, h, s, 1); }
EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) { return memset2d(d, p, v, 4, w, h, s, 1); }
ALIAS(cuMemsetD2D8, cuMemsetD2D8_v2);
ALIAS(cuMemsetD2D16, cuMemsetD2D16_v2);
ALIAS(cuMemsetD2D32, cuMemsetD2D32_v2);

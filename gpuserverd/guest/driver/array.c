/* CUDA arrays (kept by the worker) and 3-D copies of every kind: between host, device memory and
 * arrays, pitched. Host data travels packed, in boxes of at most GW_MAX_CHUNK bytes. */
#include "families.h"

#include <stdlib.h>
#include <string.h>

static CUresult create(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!arr || !d) return CUDA_ERROR_INVALID_VALUE;
    struct gw_array_create m = {.width = d->Width, .height = d->Height, .depth = d->Depth, .format = d->Format,
                                .channels = d->NumChannels, .flags = d->Flags};
    GC_ENCODE(array_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_ARRAY_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *arr = GC_PTR(CUarray, h);
    return rc;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d) { return GC_T(create(arr, d)); }

EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Format = d->Format,
                                  .NumChannels = d->NumChannels};
    return GC_T(create(arr, &d3));
}

EXPORT CUresult cuArrayDestroy(CUarray arr) {
    struct gw_array_destroy m = {.array = GC_ID(arr)};
    GC_ENCODE(array_destroy, m, b);
    return GC_T(gc_call_status(GW_TYPE_ARRAY_DESTROY, 0, b, b_n));
}

static CUresult describe(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray arr) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    struct gw_array_get_descriptor m = {.array = GC_ID(arr)};
    GC_ENCODE(array_get_descriptor, m, b);
    struct gw_array_descriptor_reply r;
    CUresult rc = gc_request(GW_TYPE_ARRAY_GET_DESCRIPTOR, 0, b, b_n, GW_TYPE_ARRAY_DESCRIPTOR_REPLY, &r);
    if (rc == CUDA_SUCCESS) {
        d->Width = r.width, d->Height = r.height, d->Depth = r.depth;
        d->Format = (CUarray_format)r.format, d->NumChannels = r.channels, d->Flags = r.flags;
    }
    return rc;
}

EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray arr) { return GC_T(describe(d, arr)); }

EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray arr) {
    if (!d) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CUresult rc = describe(&d3, arr);
    if (rc == CUDA_SUCCESS && d3.Depth) rc = CUDA_ERROR_INVALID_VALUE; /* a 3-D array has no 2-D descriptor */
    if (rc == CUDA_SUCCESS) d->Width = d3.Width, d->Height = d3.Height, d->Format = d3.Format, d->NumChannels = d3.NumChannels;
    return GC_T(rc);
}

CUresult gc_copy_side(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch, size_t height,
                      size_t x, size_t y, size_t z, struct gc_side *out) {
    *out = (struct gc_side){.pitch = pitch, .height = height, .x = x, .y = y, .z = z};
    switch (t) {
    case CU_MEMORYTYPE_HOST: out->kind = 1, out->host = host; break;
    case CU_MEMORYTYPE_DEVICE: out->kind = 2, out->ptr = dev; break;
    case CU_MEMORYTYPE_ARRAY: out->kind = 3, out->ptr = GC_ID(arr); break;
    case CU_MEMORYTYPE_UNIFIED:
        if (gc_find_alloc(dev, NULL, NULL)) out->kind = 2, out->ptr = dev;
        else out->kind = 1, out->host = (const char *)(uintptr_t)dev;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (out->kind == 1 && !out->host) return CUDA_ERROR_INVALID_VALUE;
    if (out->kind == 3 && !out->ptr) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* The host address of byte x of row y of slice z of a host side. */
static const char *host_at(const struct gc_side *s, size_t w, size_t x, size_t y, size_t z) {
    size_t pitch = s->pitch ? s->pitch : w;
    return s->host + (s->z + z) * pitch * s->height + (s->y + y) * pitch + s->x + x;
}

/* Packs (to_wire) or unpacks a w x h x d box at (x, y, z) of a host side. */
static void pack(const struct gc_side *s, size_t bw, char *buf, size_t x, size_t y, size_t z, size_t w, size_t h,
                 size_t d, int to_wire) {
    for (size_t k = 0; k < d; k++)
        for (size_t j = 0; j < h; j++) {
            char *host = (char *)host_at(s, bw, x, y + j, z + k);
            char *wire = buf + (k * h + j) * w;
            if (to_wire) memcpy(wire, host, w);
            else memcpy(host, wire, w);
        }
}

static CUresult keep_data(void *reply, void *arg) {
    const struct gw_memcpy3_d_data *r = reply;
    memcpy(arg, r->data, r->data_len);
    return CUDA_SUCCESS;
}

/* One box of at most GW_MAX_CHUNK bytes between a host side and a device or array side. */
static CUresult host_box(const struct gc_side *src, const struct gc_side *dst, size_t bw, char *buf, size_t x,
                         size_t y, size_t z, size_t w, size_t h, size_t d, uint64_t stream, int async) {
    size_t n = w * h * d;
    if (src->kind == 1) {
        pack(src, bw, buf, x, y, z, w, h, d, 1);
        struct gw_memcpy3_d_hto_x m = {.dst_kind = dst->kind, .dst = dst->ptr, .dst_pitch = dst->pitch,
                                      .dst_height = dst->height, .dst_x = dst->x + x, .dst_y = dst->y + y,
                                      .dst_z = dst->z + z, .width = w, .height = h, .depth = d,
                                      .stream = stream, .async = (uint32_t)async, .data = buf, .data_len = (uint32_t)n};
        uint8_t head[160];
        uint8_t *end = gw_memcpy3_d_hto_x_encode_head(&m, head);
        struct gw_status st;
        return gc_request_keep(GW_TYPE_MEMCPY3_D_HTO_X, async ? GW_FLAG_NO_REPLY : 0, head, end - head, buf, n,
                               GW_TYPE_STATUS, &st, NULL, NULL);
    }
    struct gw_memcpy3_d_xto_h m = {.src_kind = src->kind, .src = src->ptr, .src_pitch = src->pitch,
                                  .src_height = src->height, .src_x = src->x + x, .src_y = src->y + y,
                                  .src_z = src->z + z, .width = w, .height = h, .depth = d, .stream = stream};
    GC_ENCODE(memcpy3_d_xto_h, m, b);
    struct gw_memcpy3_d_data r;
    CUresult rc = gc_request_keep(GW_TYPE_MEMCPY3_D_XTO_H, 0, b, b_n, NULL, 0, GW_TYPE_MEMCPY3_D_DATA, &r, keep_data, buf);
    if (rc == CUDA_SUCCESS) pack(dst, bw, buf, x, y, z, w, h, d, 0);
    return rc;
}

CUresult gc_copy3d(const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d, CUstream s,
                   int async) {
    if (w == 0 || h == 0 || d == 0) return CUDA_SUCCESS;
    uint64_t stream = gc_stream_handle(s);
    if (src->kind == 1 && dst->kind == 1) { /* host to host: here */
        for (size_t k = 0; k < d; k++)
            for (size_t j = 0; j < h; j++) memmove((char *)host_at(dst, w, 0, j, k), host_at(src, w, 0, j, k), w);
        return CUDA_SUCCESS;
    }
    if (src->kind != 1 && dst->kind != 1) {
        struct gw_memcpy3_d_xto_x m = {.src_kind = src->kind, .src = src->ptr, .src_pitch = src->pitch,
                                      .src_height = src->height, .src_x = src->x, .src_y = src->y, .src_z = src->z,
                                      .dst_kind = dst->kind, .dst = dst->ptr, .dst_pitch = dst->pitch,
                                      .dst_height = dst->height, .dst_x = dst->x, .dst_y = dst->y, .dst_z = dst->z,
                                      .width = w, .height = h, .depth = d, .stream = stream, .async = (uint32_t)async};
        GC_ENCODE(memcpy3_d_xto_x, m, b);
        return gc_call_status(GW_TYPE_MEMCPY3_D_XTO_X, async ? GW_FLAG_NO_REPLY : 0, b, b_n);
    }
    if (gc_capture_refuses(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    /* With the host: boxes of whole slices, else of whole rows, else of pieces of a row. Host
     * copies are synchronous here (the data is read or written before returning); an async
     * host-to-device box is sent without waiting. */
    char *buf = malloc(GW_MAX_CHUNK);
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    const size_t chunk = GW_MAX_CHUNK;
    int to_device = src->kind == 1;
    int nowait = async && to_device;
    if (w * h <= chunk) {
        size_t per = chunk / (w * h);
        for (size_t z = 0; rc == CUDA_SUCCESS && z < d; z += per)
            rc = host_box(src, dst, w, buf, 0, 0, z, w, h, d - z < per ? d - z : per, stream, nowait);
    } else if (w <= chunk) {
        size_t per = chunk / w;
        for (size_t z = 0; rc == CUDA_SUCCESS && z < d; z++)
            for (size_t y = 0; rc == CUDA_SUCCESS && y < h; y += per)
                rc = host_box(src, dst, w, buf, 0, y, z, w, h - y < per ? h - y : per, 1, stream, nowait);
    } else {
        for (size_t z = 0; rc == CUDA_SUCCESS && z < d; z++)
            for (size_t y = 0; rc == CUDA_SUCCESS && y < h; y++)
                for (size_t x = 0; rc == CUDA_SUCCESS && x < w; x += chunk)
                    rc = host_box(src, dst, w, buf, x, y, z, w - x < chunk ? w - x : chunk, 1, 1, stream, nowait);
    }
    free(buf);
    return rc;
}

CUresult gc_copy3d_sides(const CUDA_MEMCPY3D *c, struct gc_side *src, struct gc_side *dst) {
    CUresult rc = gc_copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcHeight,
                               c->srcXInBytes, c->srcY, c->srcZ, src);
    if (rc == CUDA_SUCCESS)
        rc = gc_copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstHeight,
                          c->dstXInBytes, c->dstY, c->dstZ, dst);
    return rc;
}

static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (c->srcLOD || c->dstLOD) return CUDA_ERROR_INVALID_VALUE;
    struct gc_side src, dst;
    CUresult rc = gc_copy3d_sides(c, &src, &dst);
    if (rc != CUDA_SUCCESS) return rc;
    /* A host side's height defaults to the copy's (a 2-D copy, or packed slices). */
    if (src.kind == 1 && !src.height) src.height = c->Height;
    if (dst.kind == 1 && !dst.height) dst.height = c->Height;
    return gc_copy3d(&src, &dst, c->WidthInBytes, c->Height, c->Depth, s, async);
}

EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return GC_T(copy3d(c, NULL, 0)); }
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { return GC_T(copy3d(c, s, 1)); }

/* A 2-D copy with an array side (api_memory.c hands those here). */
CUresult gc_copy2d_arrays(const CUDA_MEMCPY2D *c, CUstream s, int async) {
    CUDA_MEMCPY3D c3 = {.srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
                        .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
                        .srcPitch = c->srcPitch, .srcHeight = c->srcY + c->Height,
                        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstMemoryType = c->dstMemoryType,
                        .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
                        .dstPitch = c->dstPitch, .dstHeight = c->dstY + c->Height,
                        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1};
    return copy3d(&c3, s, async);
}

/* The 1-D array copies: an offset into an array is a byte offset into its first row. */
static CUresult array_1d(CUmemorytype st, const void *sh, CUdeviceptr sd, CUarray sa, size_t soff, CUmemorytype dt,
                         void *dh, CUdeviceptr dd, CUarray da, size_t doff, size_t n, CUstream s, int async) {
    CUDA_MEMCPY3D c = {.srcXInBytes = soff, .srcMemoryType = st, .srcHost = sh, .srcDevice = sd, .srcArray = sa,
                       .dstXInBytes = doff, .dstMemoryType = dt, .dstHost = dh, .dstDevice = dd, .dstArray = da,
                       .WidthInBytes = n, .Height = 1, .Depth = 1};
    return copy3d(&c, s, async);
}

EXPORT CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n) {
    return GC_T(array_1d(CU_MEMORYTYPE_HOST, src, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dst, off, n, NULL, 0));
}
EXPORT CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n) {
    return GC_T(array_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, src, off, CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, n, NULL, 0));
}
EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n, CUstream s) {
    return GC_T(array_1d(CU_MEMORYTYPE_HOST, src, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dst, off, n, s, 1));
}
EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s) {
    return GC_T(array_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, src, off, CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, n, s, 1));
}
EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
    return GC_T(array_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, src, off, CU_MEMORYTYPE_DEVICE, NULL, dst, NULL, 0, n, NULL, 0));
}
EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
    return GC_T(array_1d(CU_MEMORYTYPE_DEVICE, NULL, src, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dst, off, n, NULL, 0));
}
EXPORT CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
    return GC_T(array_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, src, soff, CU_MEMORYTYPE_ARRAY, NULL, 0, dst, doff, n, NULL, 0));
}

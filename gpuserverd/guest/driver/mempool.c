/* Stream-ordered allocation and memory pools, kept by the worker (allocations are charged to the
 * session's quota from allocation to free). Pools travel as their worker ids. */
#include "families.h"

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, uint64_t pool, CUstream s) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    struct gw_mem_alloc_async m = {.bytes = bytes, .stream = gc_stream_handle(s), .pool = pool};
    GC_ENCODE(mem_alloc_async, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_MEM_ALLOC_ASYNC, b, b_n, &h);
    if (rc == CUDA_SUCCESS) {
        *dptr = h;
        gc_track_alloc(h, bytes);
    }
    return rc;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s) { return GC_T(alloc_async(dptr, bytes, 0, s)); }

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
    if (!pool) return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(alloc_async(dptr, bytes, GC_ID(pool), s));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    struct gw_mem_free_async m = {.ptr = p, .stream = gc_stream_handle(s)};
    GC_ENCODE(mem_free_async, m, b);
    CUresult rc = gc_call_status(GW_TYPE_MEM_FREE_ASYNC, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_untrack_alloc(p);
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (!pool || !props) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_pool_create m = {.alloc_type = props->allocType, .handle_types = props->handleTypes,
                                   .location_type = props->location.type, .location_id = props->location.id,
                                   .max_size = props->maxSize};
    GC_ENCODE(mem_pool_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_MEM_POOL_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *pool = GC_PTR(CUmemoryPool, h);
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    struct gw_mem_pool_destroy m = {.pool = GC_ID(pool)};
    GC_ENCODE(mem_pool_destroy, m, b);
    return GC_T(gc_call_status(GW_TYPE_MEM_POOL_DESTROY, 0, b, b_n));
}

/* The reuse attributes are ints; the rest are cuuint64_t. */
static int int_attribute(CUmemPool_attribute a) { return a >= 1 && a <= 3; }

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!value) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint64_t v = int_attribute(attr) ? (uint64_t) * (int *)value : *(cuuint64_t *)value;
    struct gw_mem_pool_set_attribute m = {.pool = GC_ID(pool), .attribute = attr, .value = v};
    GC_ENCODE(mem_pool_set_attribute, m, b);
    return GC_T(gc_call_status(GW_TYPE_MEM_POOL_SET_ATTRIBUTE, 0, b, b_n));
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!value) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_pool_get_attribute m = {.pool = GC_ID(pool), .attribute = attr};
    GC_ENCODE(mem_pool_get_attribute, m, b);
    struct gw_size_reply r;
    CUresult rc = gc_request(GW_TYPE_MEM_POOL_GET_ATTRIBUTE, 0, b, b_n, GW_TYPE_SIZE_REPLY, &r);
    if (rc == CUDA_SUCCESS) {
        if (int_attribute(attr)) *(int *)value = (int)r.value;
        else *(cuuint64_t *)value = r.value;
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    struct gw_mem_pool_trim_to m = {.pool = GC_ID(pool), .min_bytes = keep};
    GC_ENCODE(mem_pool_trim_to, m, b);
    return GC_T(gc_call_status(GW_TYPE_MEM_POOL_TRIM_TO, 0, b, b_n));
}

/* The pool queries name a device; the worker answers for its current one, so that device must be
 * the calling thread's context's. */
static CUresult own_device(CUdevice dev) {
    int cur;
    CUresult rc = gc_current_device(&cur);
    if (rc == CUDA_SUCCESS && cur != dev) rc = CUDA_ERROR_INVALID_DEVICE;
    return rc;
}

static CUresult get_pool(CUmemoryPool *pool, CUdevice dev, uint32_t which) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = own_device(dev);
    if (rc != CUDA_SUCCESS) return rc;
    struct gw_device_get_mem_pool m = {.ordinal = (uint32_t)dev, .which = which};
    GC_ENCODE(device_get_mem_pool, m, b);
    uint64_t h;
    rc = gc_handle_call(GW_TYPE_DEVICE_GET_MEM_POOL, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *pool = GC_PTR(CUmemoryPool, h);
    return rc;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) { return GC_T(get_pool(pool, dev, 1)); }
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) { return GC_T(get_pool(pool, dev, 0)); }

EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    CUresult rc = own_device(dev);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_device_set_mem_pool m = {.ordinal = (uint32_t)dev, .pool = GC_ID(pool)};
    GC_ENCODE(device_set_mem_pool, m, b);
    return GC_T(gc_call_status(GW_TYPE_DEVICE_SET_MEM_POOL, 0, b, b_n));
}

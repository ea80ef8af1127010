/* Virtual memory management: address reservations, physical allocations and their mappings, all
 * kept by the worker (which charges physical allocations to the session's quota). NVIDIA's
 * reservations are the process's, not a context's: a program may unmap and free them with no
 * context current (NVIDIA's memMapIPCDrv does, after cuCtxDestroy). The worker keeps them per
 * device, so each reservation's device is kept here, and a call on its addresses made without a
 * context goes to that device's primary context. */
#include "families.h"

#include <stdlib.h>
#include <string.h>

struct reservation {
    CUdeviceptr ptr;
    size_t size;
    int dev;
    struct reservation *next;
};
static pthread_mutex_t res_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reservation *reservations;

/* device_of is the device whose reservation holds p (0 when none does). */
static int device_of(CUdeviceptr p) {
    int dev = 0;
    pthread_mutex_lock(&res_mu);
    for (struct reservation *r = reservations; r; r = r->next)
        if (p >= r->ptr && p - r->ptr < r->size) dev = r->dev;
    pthread_mutex_unlock(&res_mu);
    return dev;
}

/* reserve_call runs a call on p's reservation, on its device's primary context when the thread
 * has no context. */
static CUresult reserve_call(CUdeviceptr p, uint16_t type, const uint8_t *b, size_t n) {
    int dev = device_of(p);
    int pushed = gc_ctx_fallback(dev);
    CUresult rc = gc_call_status(type, 0, b, n);
    gc_ctx_restore(pushed, dev);
    return rc;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
    if (!ptr) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_address_reserve m = {.size = size, .alignment = alignment, .addr = addr, .flags = flags};
    GC_ENCODE(mem_address_reserve, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_MEM_ADDRESS_RESERVE, b, b_n, &h);
    int dev = 0;
    struct reservation *r = NULL;
    if (rc == CUDA_SUCCESS && gc_current_device(&dev) == CUDA_SUCCESS && (r = malloc(sizeof *r))) {
        *r = (struct reservation){.ptr = h, .size = size, .dev = dev};
        pthread_mutex_lock(&res_mu);
        r->next = reservations;
        reservations = r;
        pthread_mutex_unlock(&res_mu);
    }
    if (rc == CUDA_SUCCESS) *ptr = h;
    return GC_T(rc);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    struct gw_mem_address_free m = {.ptr = ptr, .size = size};
    GC_ENCODE(mem_address_free, m, b);
    CUresult rc = reserve_call(ptr, GW_TYPE_MEM_ADDRESS_FREE, b, b_n);
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&res_mu);
        for (struct reservation **pp = &reservations; *pp; pp = &(*pp)->next)
            if ((*pp)->ptr == ptr) {
                struct reservation *r = *pp;
                *pp = r->next;
                free(r);
                break;
            }
        pthread_mutex_unlock(&res_mu);
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    if (!handle || !prop) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_create m = {.size = size, .alloc_type = prop->type, .location_type = prop->location.type,
                              .location_id = prop->location.id, .handle_types = prop->requestedHandleTypes,
                              .flags = flags, .compression = prop->allocFlags.compressionType};
    GC_ENCODE(mem_create, m, b);
    uint64_t h;
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : 0;
    int pushed = gc_ctx_fallback(dev); /* none needed (driver/ipc.c) */
    CUresult rc = gc_handle_call(GW_TYPE_MEM_CREATE, b, b_n, &h);
    gc_ctx_restore(pushed, dev);
    if (rc == CUDA_SUCCESS) *handle = h;
    return GC_T(rc);
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    struct gw_mem_release m = {.handle = handle};
    GC_ENCODE(mem_release, m, b);
    int pushed = gc_ctx_fallback(0); /* none needed (driver/ipc.c) */
    CUresult rc = gc_call_status(GW_TYPE_MEM_RELEASE, 0, b, b_n);
    gc_ctx_restore(pushed, 0);
    return GC_T(rc);
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    struct gw_mem_map m = {.ptr = ptr, .size = size, .offset = offset, .handle = handle, .flags = flags};
    GC_ENCODE(mem_map, m, b);
    CUresult rc = reserve_call(ptr, GW_TYPE_MEM_MAP, b, b_n);
    if (rc == CUDA_SUCCESS) gc_track_alloc(ptr, size); /* cuMemcpy tells device from host memory by it */
    return GC_T(rc);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    struct gw_mem_unmap m = {.ptr = ptr, .size = size};
    GC_ENCODE(mem_unmap, m, b);
    CUresult rc = reserve_call(ptr, GW_TYPE_MEM_UNMAP, b, b_n);
    if (rc == CUDA_SUCCESS) {
        CUdeviceptr base;
        size_t n;
        for (CUdeviceptr p = ptr; p < ptr + size && gc_find_alloc(p, &base, &n); p = base + n) gc_untrack_alloc(base);
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    if (!desc || count == 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        struct gw_mem_set_access m = {.ptr = ptr, .size = size, .location_type = desc[i].location.type,
                                      .location_id = desc[i].location.id, .flags = desc[i].flags};
        GC_ENCODE(mem_set_access, m, b);
        rc = reserve_call(ptr, GW_TYPE_MEM_SET_ACCESS, b, b_n);
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
    if (!granularity || !prop) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_get_allocation_granularity m = {.alloc_type = prop->type, .location_type = prop->location.type,
                                                  .location_id = prop->location.id, .option = option};
    GC_ENCODE(mem_get_allocation_granularity, m, b);
    struct gw_size_reply r;
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : 0;
    int pushed = gc_ctx_fallback(dev); /* none needed (driver/ipc.c) */
    CUresult rc = gc_request(GW_TYPE_MEM_GET_ALLOCATION_GRANULARITY, 0, b, b_n, GW_TYPE_SIZE_REPLY, &r);
    gc_ctx_restore(pushed, dev);
    if (rc == CUDA_SUCCESS) *granularity = r.value;
    return GC_T(rc);
}

EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
    if (!prop) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_get_allocation_properties m = {.handle = handle};
    GC_ENCODE(mem_get_allocation_properties, m, b);
    struct gw_mem_allocation_properties_reply r;
    CUresult rc = gc_request(GW_TYPE_MEM_GET_ALLOCATION_PROPERTIES, 0, b, b_n,
                             GW_TYPE_MEM_ALLOCATION_PROPERTIES_REPLY, &r);
    if (rc == CUDA_SUCCESS) {
        memset(prop, 0, sizeof *prop);
        prop->type = (CUmemAllocationType)r.alloc_type;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)r.handle_types;
        prop->location.type = (CUmemLocationType)r.location_type;
        prop->location.id = r.location_id;
        prop->allocFlags.compressionType = (unsigned char)r.compression; /* what the driver gave */
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    if (!handle) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_retain_allocation_handle m = {.ptr = (uint64_t)(uintptr_t)addr};
    GC_ENCODE(mem_retain_allocation_handle, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_MEM_RETAIN_ALLOCATION_HANDLE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *handle = h;
    return GC_T(rc);
}

/* Pointer attributes, answered here from the device ranges this library tracks (cuMemAlloc,
 * stream-ordered allocations, virtual-memory mappings): the worker holds nothing more to ask.
 * Host memory is not tracked here: a host pointer reads as no CUDA memory (cudart keeps its own
 * record of the page-locked ranges it hands out). */
#include "families.h"

#include "driver/coherence.h"

#include <stdbool.h>
#include <string.h>

/* One attribute of device range [base, base+size) holding p; known: whether p is device memory. */
static CUresult attribute(void *data, CUpointer_attribute a, CUdeviceptr p, int known, CUdeviceptr base, size_t size) {
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: { /* mapped host memory kept coherent (coherence.c) is host memory */
        int kind = 0;
        *(unsigned *)data = gc_coh_find((void *)(uintptr_t)p, 0, &kind) && kind == GC_COH_MAPPED_HOST ? CU_MEMORYTYPE_HOST
                            : known                                                              ? CU_MEMORYTYPE_DEVICE
                                                                                                 : 0;
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: { /* coherent managed memory (coherence.c) */
        int kind = 0;
        *(unsigned *)data = gc_coh_find((void *)(uintptr_t)p, 0, &kind) && kind == GC_COH_MANAGED;
        return CUDA_SUCCESS;
    }
    default: break;
    }
    if (!known) return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return cuCtxGetCurrent((CUcontext *)data);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = p; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: /* device memory is not mapped here, but coherent memory is, alike */
        if (!gc_coh_find((void *)(uintptr_t)p, 0, NULL)) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(bool *)data = false; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return gc_current_device((int *)data);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(bool *)data = false; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(bool *)data = true; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned *)data = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data = NULL; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    CUdeviceptr base = 0;
    size_t size = 0;
    int known = gc_find_alloc(p, &base, &size);
    if (!known && a != CU_POINTER_ATTRIBUTE_MEMORY_TYPE && a != CU_POINTER_ATTRIBUTE_IS_MANAGED)
        return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(attribute(data, a, p, known, base, size));
}

/* As the driver does, a pointer that is no CUDA memory is answered, not refused: memory type 0;
 * an attribute without a value for the pointer reads as zero. */
EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr p) {
    if (!attrs || !data) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base = 0;
    size_t size = 0;
    int known = gc_find_alloc(p, &base, &size);
    for (unsigned i = 0; i < n; i++) {
        CUresult rc = attribute(data[i], attrs[i], p, known, base, size);
        if (rc == CUDA_ERROR_INVALID_VALUE && data[i]) { /* no such value here (a host pointer of device memory) */
            memset(data[i], 0, attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT || attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
                                       attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                                       attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                                       attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                                       attrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID
                                   ? 8
                                   : 4);
            continue;
        }
        if (rc != CUDA_SUCCESS) return GC_T(rc);
    }
    return GC_T(CUDA_SUCCESS);
}

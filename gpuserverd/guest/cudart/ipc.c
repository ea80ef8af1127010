/* The runtime's IPC between processes: a layer over the driver's (guest/driver/ipc.c in a VM,
 * where handles carry the instance registry's keys; NVIDIA's driver natively). The runtime's
 * handles, export data, access descriptors and handle types are the driver's byte for byte. */
#include "internal.h"

#include <string.h>

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
    READY();
    return ret(cuIpcGetMemHandle((CUipcMemHandle *)h, (CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned flags) {
    READY();
    CUipcMemHandle dh;
    memcpy(&dh, &h, sizeof dh);
    return ret(cuIpcOpenMemHandle_v2((CUdeviceptr *)p, dh, flags));
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *p) {
    READY();
    return ret(cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e) {
    READY();
    return ret(cuIpcGetEventHandle((CUipcEventHandle *)h, (CUevent)e));
}

EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h) {
    READY();
    CUipcEventHandle dh;
    memcpy(&dh, &h, sizeof dh);
    return ret(cuIpcOpenEventHandle((CUevent *)e, dh));
}

EXPORT cudaError_t cudaMemPoolExportToShareableHandle(void *out, cudaMemPool_t pool,
                                                      enum cudaMemAllocationHandleType type, unsigned flags) {
    READY();
    return ret(cuMemPoolExportToShareableHandle(out, (CUmemoryPool)pool, (CUmemAllocationHandleType)type, flags));
}

EXPORT cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t *pool, void *handle,
                                                        enum cudaMemAllocationHandleType type, unsigned flags) {
    READY();
    return ret(cuMemPoolImportFromShareableHandle((CUmemoryPool *)pool, handle, (CUmemAllocationHandleType)type, flags));
}

EXPORT cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *d, void *p) {
    READY();
    return ret(cuMemPoolExportPointer((CUmemPoolPtrExportData *)d, (CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaMemPoolImportPointer(void **p, cudaMemPool_t pool, struct cudaMemPoolPtrExportData *d) {
    READY();
    return ret(cuMemPoolImportPointer((CUdeviceptr *)p, (CUmemoryPool)pool, (CUmemPoolPtrExportData *)d));
}

EXPORT cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t pool, struct cudaMemLocation *loc) {
    READY();
    return ret(cuMemPoolGetAccess((CUmemAccess_flags *)flags, (CUmemoryPool)pool, (CUmemLocation *)loc));
}

EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *map, size_t count) {
    READY();
    return ret(cuMemPoolSetAccess((CUmemoryPool)pool, (const CUmemAccessDesc *)map, count));
}

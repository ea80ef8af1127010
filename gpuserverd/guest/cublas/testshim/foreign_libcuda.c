/* A libcuda.so.1 that is not gpucloud's guest library, as NVIDIA's driver is to gpucloud's
 * libcublas: it initialises, and has no gpucloud export table. A test double for guesttest. */
#include <cuda.h>
#include <stddef.h>

__attribute__((visibility("default"))) CUresult cuInit(unsigned flags) {
    (void)flags;
    return CUDA_SUCCESS;
}
__attribute__((visibility("default"))) CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    *table = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
__attribute__((visibility("default"))) CUresult cuGetErrorName(CUresult r, const char **s) {
    (void)r;
    *s = "foreign";
    return CUDA_SUCCESS;
}

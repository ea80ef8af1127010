/* gpucloud's libcurand.so.10: cuRAND's host API remoted to gpuserverd through the generic library
 * call (RandCall; backend/libcall.go). Generators are the worker's ids. calls_gen.c has every
 * function of NVIDIA's curand.h; this file what answers without the server. NVIDIA's device-side
 * cuRAND (curand_kernel.h) is header-only: kernels that use it need nothing from this library. */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_curand_guest = 1;

GC_LIBCALL_DEFINE("libcurand", rand, RAND, CURAND_STATUS_INITIALIZATION_FAILED, CURAND_STATUS_INTERNAL_ERROR)

/* The cuRAND API this library implements: CUDA 13's (CURAND_VERSION 10400). */
EXPORT int curandGetVersion(int *version) {
    if (!version) return CURAND_STATUS_OUT_OF_RANGE;
    *version = 10400;
    return CURAND_STATUS_SUCCESS;
}

/* curandGetProperty(libraryPropertyType, int *): MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2. */
EXPORT int curandGetProperty(int type, int *value) {
    static const int v[3] = {10, 4, 0};
    if (!value || type < 0 || type > 2) return CURAND_STATUS_OUT_OF_RANGE;
    *value = v[type];
    return CURAND_STATUS_SUCCESS;
}

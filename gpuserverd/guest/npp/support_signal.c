/* nppsMalloc_* and nppsFree (libnpps.so.13): device memory through the guest libcuda. A size of 0,
 * or a failed allocation, answers NULL as NVIDIA's does. */
#include "internal.h"

static void *vec(size_t n, size_t elem) {
    CUdeviceptr d;
    if (n == 0 || n > SIZE_MAX / elem || cuMemAlloc(&d, n * elem) != CUDA_SUCCESS) return NULL;
    return (void *)(uintptr_t)d;
}

EXPORT void nppsFree(void *p) {
    if (p) cuMemFree((CUdeviceptr)(uintptr_t)p);
}

EXPORT void *nppsMalloc_16s(size_t n) { return vec(n, 2); }
EXPORT void *nppsMalloc_16sc(size_t n) { return vec(n, 4); }
EXPORT void *nppsMalloc_16u(size_t n) { return vec(n, 2); }
EXPORT void *nppsMalloc_32f(size_t n) { return vec(n, 4); }
EXPORT void *nppsMalloc_32fc(size_t n) { return vec(n, 8); }
EXPORT void *nppsMalloc_32s(size_t n) { return vec(n, 4); }
EXPORT void *nppsMalloc_32sc(size_t n) { return vec(n, 8); }
EXPORT void *nppsMalloc_32u(size_t n) { return vec(n, 4); }
EXPORT void *nppsMalloc_64f(size_t n) { return vec(n, 8); }
EXPORT void *nppsMalloc_64fc(size_t n) { return vec(n, 16); }
EXPORT void *nppsMalloc_64s(size_t n) { return vec(n, 8); }
EXPORT void *nppsMalloc_64sc(size_t n) { return vec(n, 16); }
EXPORT void *nppsMalloc_8s(size_t n) { return vec(n, 1); }
EXPORT void *nppsMalloc_8u(size_t n) { return vec(n, 1); }

/* nppiMalloc_* and nppiFree (libnppisu.so.13): pitched device memory through the guest libcuda.
 * A width or height under 1, or a failed allocation, answers NULL as NVIDIA's does. */
#include "internal.h"

static void *image(int w, int h, int elem, int *step) {
    CUdeviceptr d;
    size_t pitch;
    if (w < 1 || h < 1 || !step) return NULL;
    if (cuMemAllocPitch(&d, &pitch, (size_t)w * (size_t)elem, (size_t)h, elem >= 16 ? 16 : elem >= 8 ? 8 : 4) != CUDA_SUCCESS)
        return NULL;
    if (pitch > (size_t)INT32_MAX) {
        cuMemFree(d);
        return NULL;
    }
    *step = (int)pitch;
    return (void *)(uintptr_t)d;
}

EXPORT void nppiFree(void *p) {
    if (p) cuMemFree((CUdeviceptr)(uintptr_t)p);
}

EXPORT void *nppiMalloc_16s_C1(int w, int h, int *step) { return image(w, h, 2, step); }
EXPORT void *nppiMalloc_16s_C2(int w, int h, int *step) { return image(w, h, 4, step); }
EXPORT void *nppiMalloc_16s_C4(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_16sc_C1(int w, int h, int *step) { return image(w, h, 4, step); }
EXPORT void *nppiMalloc_16sc_C2(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_16sc_C3(int w, int h, int *step) { return image(w, h, 12, step); }
EXPORT void *nppiMalloc_16sc_C4(int w, int h, int *step) { return image(w, h, 16, step); }
EXPORT void *nppiMalloc_16u_C1(int w, int h, int *step) { return image(w, h, 2, step); }
EXPORT void *nppiMalloc_16u_C2(int w, int h, int *step) { return image(w, h, 4, step); }
EXPORT void *nppiMalloc_16u_C3(int w, int h, int *step) { return image(w, h, 6, step); }
EXPORT void *nppiMalloc_16u_C4(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_32f_C1(int w, int h, int *step) { return image(w, h, 4, step); }
EXPORT void *nppiMalloc_32f_C2(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_32f_C3(int w, int h, int *step) { return image(w, h, 12, step); }
EXPORT void *nppiMalloc_32f_C4(int w, int h, int *step) { return image(w, h, 16, step); }
EXPORT void *nppiMalloc_32fc_C1(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_32fc_C2(int w, int h, int *step) { return image(w, h, 16, step); }
EXPORT void *nppiMalloc_32fc_C3(int w, int h, int *step) { return image(w, h, 24, step); }
EXPORT void *nppiMalloc_32fc_C4(int w, int h, int *step) { return image(w, h, 32, step); }
EXPORT void *nppiMalloc_32s_C1(int w, int h, int *step) { return image(w, h, 4, step); }
EXPORT void *nppiMalloc_32s_C3(int w, int h, int *step) { return image(w, h, 12, step); }
EXPORT void *nppiMalloc_32s_C4(int w, int h, int *step) { return image(w, h, 16, step); }
EXPORT void *nppiMalloc_32sc_C1(int w, int h, int *step) { return image(w, h, 8, step); }
EXPORT void *nppiMalloc_32sc_C2(int w, int h, int *step) { return image(w, h, 16, step); }
EXPORT void *nppiMalloc_32sc_C3(int w, int h, int *step) { return image(w, h, 24, step); }
EXPORT void *nppiMalloc_32sc_C4(int w, int h, int *step) { return image(w, h, 32, step); }
EXPORT void *nppiMalloc_8u_C1(int w, int h, int *step) { return image(w, h, 1, step); }
EXPORT void *nppiMalloc_8u_C2(int w, int h, int *step) { return image(w, h, 2, step); }
EXPORT void *nppiMalloc_8u_C3(int w, int h, int *step) { return image(w, h, 3, step); }
EXPORT void *nppiMalloc_8u_C4(int w, int h, int *step) { return image(w, h, 4, step); }

/* gpucloud's libcufft.so.12: cuFFT remoted to gpuserverd through the generic library call
 * (FftCall; backend/libcall.go). Plans are the worker's ids; executions go without waiting, like
 * kernel launches. calls_gen.c has every function of NVIDIA's cufftXt.h; this file what answers
 * without the server. */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cufft_guest = 1;

GC_LIBCALL_DEFINE("libcufft", fft, FFT, CUFFT_SETUP_FAILED, CUFFT_INTERNAL_ERROR)

/* The cuFFT API this library implements: CUDA 13's (CUFFT_VERSION 12000). */
EXPORT int cufftGetVersion(int *version) {
    if (!version) return CUFFT_INVALID_VALUE;
    *version = 12000;
    return CUFFT_SUCCESS;
}

/* cufftGetProperty(libraryPropertyType, int *): MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2. */
EXPORT int cufftGetProperty(int type, int *value) {
    static const int v[3] = {12, 0, 0};
    if (!value || type < 0 || type > 2) return CUFFT_INVALID_VALUE;
    *value = v[type];
    return CUFFT_SUCCESS;
}

/* gpucloud's libnvjpeg.so.13: nvJPEG remoted to gpuserverd through the generic library call
 * (JpegCall; backend/libcall.go). Handles, states, decoders, buffers, streams and parameters are
 * the worker's ids. calls_gen.c has every function of NVIDIA's nvjpeg.h; this file keeps what the
 * server cannot take (the tenant's allocators) and what answers without it (versions). */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_nvjpeg_guest = 1;

GC_LIBCALL_DEFINE("libnvjpeg", jpeg, JPEG, NVJPEG_STATUS_NOT_INITIALIZED, NVJPEG_STATUS_INTERNAL_ERROR)

int gcr_nvjpegCreate(int backend, void *dev_allocator, void *handle);
int gcr_nvjpegCreateEx(int backend, void *dev_allocator, void *pinned_allocator, uint32_t flags, void *handle);
int gcr_nvjpegCreateExV2(int backend, void *dev_allocator, void *pinned_allocator, uint32_t flags, void *handle);
int gcr_nvjpegBufferPinnedCreate(void *handle, void *pinned_allocator, void *buffer);
int gcr_nvjpegBufferPinnedCreateV2(void *handle, void *pinned_allocator, void *buffer);
int gcr_nvjpegBufferDeviceCreate(void *handle, void *device_allocator, void *buffer);
int gcr_nvjpegBufferDeviceCreateV2(void *handle, void *device_allocator, void *buffer);

/* An allocator is the tenant's function pointers: they cannot run on the GPU server, where the
 * library allocates. NVIDIA's default allocators (cudaMalloc, cudaHostAlloc in the worker) take
 * their place; a program that counts on its own allocator being called is told so once. */
static void allocators(const void *dev, const void *pinned) {
    static atomic_int told;
    if ((dev || pinned) && !atomic_exchange(&told, 1))
        fprintf(stderr, "gpucloud libnvjpeg: the program's allocators cannot run on the GPU server; "
                        "nvJPEG's default allocators are used there instead\n");
}

EXPORT int nvjpegCreate(int backend, void *dev_allocator, void *handle) {
    allocators(dev_allocator, NULL);
    return gcr_nvjpegCreate(backend, NULL, handle);
}

EXPORT int nvjpegCreateEx(int backend, void *dev_allocator, void *pinned_allocator, uint32_t flags, void *handle) {
    allocators(dev_allocator, pinned_allocator);
    return gcr_nvjpegCreateEx(backend, NULL, NULL, flags, handle);
}

EXPORT int nvjpegCreateExV2(int backend, void *dev_allocator, void *pinned_allocator, uint32_t flags, void *handle) {
    allocators(dev_allocator, pinned_allocator);
    return gcr_nvjpegCreateExV2(backend, NULL, NULL, flags, handle);
}

EXPORT int nvjpegBufferPinnedCreate(void *handle, void *pinned_allocator, void *buffer) {
    allocators(NULL, pinned_allocator);
    return gcr_nvjpegBufferPinnedCreate(handle, NULL, buffer);
}

EXPORT int nvjpegBufferPinnedCreateV2(void *handle, void *pinned_allocator, void *buffer) {
    allocators(NULL, pinned_allocator);
    return gcr_nvjpegBufferPinnedCreateV2(handle, NULL, buffer);
}

EXPORT int nvjpegBufferDeviceCreate(void *handle, void *device_allocator, void *buffer) {
    allocators(device_allocator, NULL);
    return gcr_nvjpegBufferDeviceCreate(handle, NULL, buffer);
}

EXPORT int nvjpegBufferDeviceCreateV2(void *handle, void *device_allocator, void *buffer) {
    allocators(device_allocator, NULL);
    return gcr_nvjpegBufferDeviceCreateV2(handle, NULL, buffer);
}

/* The nvJPEG release whose API this library remotes (nvjpeg.h of CUDA 13.0), and the runtime's. */
static int property(const int v[3], int type, int *value) {
    if (!value || type < 0 || type > 2) return NVJPEG_STATUS_INVALID_PARAMETER;
    *value = v[type];
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT int nvjpegGetProperty(int type, int *value) {
    static const int v[3] = {13, 0, 1};
    return property(v, type, value);
}

EXPORT int nvjpegGetCudartProperty(int type, int *value) {
    static const int v[3] = {13, 0, 0};
    return property(v, type, value);
}

/* What the files of gpucloud's libcudart share: error reporting, the current device and its
 * primary context, kernel lookup by host stub, and driver functions found at run time. */
#ifndef GPUCLOUD_CUDART_INTERNAL_H
#define GPUCLOUD_CUDART_INTERNAL_H
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16

extern __thread int cur_dev;
extern pthread_mutex_t mu;

/* ret records a failure as the thread's last error and gives it back as a cudaError_t. */
cudaError_t ret(CUresult rc);
/* device_context is device d's primary context, retained on first use. */
CUresult device_context(int d, CUcontext *out);
/* ready makes the current device's primary context current on this thread. */
CUresult ready(void);
#define READY()                                 \
    do {                                        \
        CUresult r_ = ready();                  \
        if (r_ != CUDA_SUCCESS) return ret(r_); \
    } while (0)

/* function is the driver function of the kernel whose host stub is host, on the current device. */
CUresult function(const void *host, CUfunction *out);
/* A runtime kernel node's parameters as the driver's (families.c). */
CUresult kernel_node_params(const struct cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS *k);
/* A runtime memset node's parameters as the driver's, with the current device's primary context
 * made current and given in *ctx, which the driver's memset node calls take (families.c). */
CUresult memset_node_params(const struct cudaMemsetParams *p, CUDA_MEMSET_NODE_PARAMS *m, CUcontext *ctx);

/* driver_fn finds a driver entry point by name through cuGetProcAddress, caching it in *slot:
 * NULL when the driver in use (the guest library, say) does not offer it. Functions found this
 * way are the ones the guest library may lack; a caller answers cudaErrorNotSupported then. */
void *driver_fn(void **slot, const char *name);
#define DRIVER(type, name) ((type)driver_fn(&name##_slot, #name))
#define DRIVER_SLOT(name) static void *name##_slot

/* Page-locked host ranges this runtime handed out or registered, for cudaPointerGetAttributes
 * on a driver without cuPointerGetAttributes. */
void host_track(void *p, size_t n);
void host_untrack(void *p);
int host_find(const void *p);

/* Streams this runtime created and their flags, for cudaStreamGetFlags on a driver without
 * cuStreamGetFlags. */
void stream_track(cudaStream_t s, unsigned flags);
void stream_untrack(cudaStream_t s);
int stream_flags(cudaStream_t s, unsigned *flags);

/* more_properties fills cudaDeviceProp's fields beyond the core ones (torch_props.c). */
void more_properties(struct cudaDeviceProp *p, CUdevice dev);

#endif

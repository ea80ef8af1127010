/* What rt_sim_test's files share: the runtime's declarations (testshim's header declares types
 * only), the RT check, and the registered kernels' host stubs. */
#ifndef RT_SIM_H
#define RT_SIM_H
#include <cuda_runtime_api.h>
#include <cuda_profiler_api.h>
#include <stdio.h>
#include <stdlib.h>

/* What nvcc's host_runtime.h declares. */
void **__cudaRegisterFatBinary(void *wrapper);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *host, char *dev, const char *name, int limit, uint3 *tid,
                            uint3 *bid, dim3 *bdim, dim3 *gdim, int *wsize);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, cudaStream_t stream);
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *host);
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchKernel(const void *host, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *, int);
cudaError_t cudaDeviceGetAttribute(int *, enum cudaDeviceAttr, int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaDeviceSynchronize(void);
const char *cudaGetErrorName(cudaError_t);
void __cudaRegisterVar(void **handle, char *host, char *dev, const char *name, int ext, size_t size, int constant,
                       int global);
cudaError_t cudaMemcpyToSymbol(const void *, const void *, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyFromSymbol(void *, const void *, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyToSymbolAsync(const void *, const void *, size_t, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpyFromSymbolAsync(void *, const void *, size_t, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaGetSymbolAddress(void **, const void *);
cudaError_t cudaGetSymbolSize(size_t *, const void *);

#define RT(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call, e_, cudaGetErrorName(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)


/* Beyond the basics (rt_sim_more.c). */
cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemset2D(void *, size_t, int, size_t, size_t);
cudaError_t cudaMemset2DAsync(void *, size_t, int, size_t, size_t, cudaStream_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaHostRegister(void *, size_t, unsigned);
cudaError_t cudaHostUnregister(void *);
cudaError_t cudaHostGetDevicePointer(void **, void *, unsigned);
cudaError_t cudaHostGetFlags(unsigned *, void *);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *, const void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
cudaError_t cudaDeviceCanAccessPeer(int *, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDeviceDisablePeerAccess(int);
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t, void *);
cudaError_t cudaStreamAddCallback(cudaStream_t, cudaStreamCallback_t, void *, unsigned);
cudaError_t cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int);
cudaError_t cudaFuncSetCacheConfig(const void *, enum cudaFuncCache);
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *, const void *);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *, const void *, int, size_t);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *, const void *, int, size_t, unsigned);
cudaError_t cudaDeviceSetLimit(enum cudaLimit, size_t);
cudaError_t cudaDeviceGetLimit(size_t *, enum cudaLimit);
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache);
cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *);
cudaError_t cudaSetDeviceFlags(unsigned);
cudaError_t cudaGetDeviceFlags(unsigned *);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *, unsigned, int);
cudaError_t cudaDeviceGetStreamPriorityRange(int *, int *);
cudaError_t cudaStreamGetFlags(cudaStream_t, unsigned *);
cudaError_t cudaStreamGetPriority(cudaStream_t, int *);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t, unsigned);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, unsigned long long,
                                             enum cudaDriverEntryPointQueryResult *);
cudaError_t cudaGetDriverEntryPoint(const char *, void **, unsigned long long, enum cudaDriverEntryPointQueryResult *);
const char *cudaGetErrorString(cudaError_t);

/* fill_u32's host stub: pops a <<<...>>> configuration and launches; unregistered_stub was
 * never registered. */
void fill_u32_stub(unsigned *p, unsigned v, int n);
void unregistered_stub(void);

void more_memory(int ndev);
void more_exec(void);
void more_families(void); /* rt_sim_families.c */
void graph_hosts(void);   /* rt_sim_graphs.c */
#endif

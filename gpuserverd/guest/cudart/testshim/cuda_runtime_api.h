/* A test double of the CUDA toolkit's cuda_runtime_api.h: just the types and values cudart.c uses,
 * so CI (no toolkit) can build gpucloud's libcudart against the guest library's cuda.h and run it
 * on the simulated backend. The GPU machine builds against NVIDIA's real header, which checks the
 * signatures; nothing here is shipped. Layouts of the structs are NOT NVIDIA's. */
#ifndef GPUCLOUD_TEST_CUDA_RUNTIME_API_H
#define GPUCLOUD_TEST_CUDA_RUNTIME_API_H
#include <cuda.h>
#include <stddef.h>

#define CUDART_VERSION 13000

typedef enum cudaError_enum_shim {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorNotSupported = 801,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrWarpSize = 10, cudaDevAttrComputeCapabilityMajor = 75 };

typedef struct { unsigned x, y, z; } uint3;
typedef struct { unsigned x, y, z; } dim3;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUkern_st *cudaKernel_t;
typedef struct { char bytes[16]; } cudaUUID_t;

struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem, sharedMemPerBlock;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    size_t totalConstMem;
    int major, minor, multiProcessorCount, pciBusID, pciDeviceID, pciDomainID, l2CacheSize;
    int maxThreadsPerMultiProcessor, unifiedAddressing;
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion;
};

#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
#endif

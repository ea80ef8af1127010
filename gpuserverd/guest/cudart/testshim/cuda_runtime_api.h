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
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInsufficientDriver = 35,
    cudaErrorUnsupportedLimit = 215,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
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
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
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
    size_t sharedMemPerMultiprocessor, sharedMemPerBlockOptin, reservedSharedMemPerBlock;
    int asyncEngineCount, concurrentKernels, regsPerMultiprocessor, managedMemory;
    int maxBlocksPerMultiProcessor;
    /* torch_props.c's */
    size_t memPitch, textureAlignment, texturePitchAlignment;
    int integrated, canMapHostMemory, ECCEnabled, tccDriver, memoryBusWidth, streamPrioritiesSupported;
    int globalL1CacheSupported, localL1CacheSupported, isMultiGpuBoard, multiGpuBoardGroupID;
    int hostNativeAtomicSupported, pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported;
    int canUseHostPointerForRegisteredMem, cooperativeLaunch, hostRegisterSupported, persistingL2CacheMaxSize;
    int accessPolicyMaxWindowSize, memoryPoolsSupported, clusterLaunch, ipcEventSupported;
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion;
    int maxDynamicSharedSizeBytes, preferredShmemCarveout;
};

enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};

typedef void (*cudaHostFn_t)(void *data);
typedef void (*cudaStreamCallback_t)(cudaStream_t s, cudaError_t status, void *data);

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2, cudaFuncCachePreferEqual = 3 };
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2 };
enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2,
};

#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceScheduleMask 0x07
#define cudaDeviceMapHost 0x08
#define cudaDeviceMask 0xff
#define cudaEventRecordDefault 0x00
#define cudaEventRecordExternal 0x01
#define cudaOccupancyDefault 0x00
#define cudaHostRegisterDefault 0x00
#define cudaEnableDefault 0x0
#define cudaEnableLegacyStream 0x1
#define cudaEnablePerThreadDefaultStream 0x2

#include "cuda_runtime_families.h"
#include "cuda_runtime_ipc.h"

/* The runtime's own calls that its other files use. */
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaGetDeviceCount(int *n);

#define cudaGetDeviceProperties cudaGetDeviceProperties_v2
#endif

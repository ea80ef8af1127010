/* Test double, continued: the runtime types of the hand-written families (cudart/families.c),
 * named as NVIDIA's driver_types.h names them; layouts follow NVIDIA's where the runtime casts
 * them to the driver's (pools, launch attributes, update results). */
#ifndef GPUCLOUD_TEST_CUDA_RUNTIME_FAMILIES_H
#define GPUCLOUD_TEST_CUDA_RUNTIME_FAMILIES_H

typedef struct cudaArray *cudaArray_t;
typedef const struct cudaArray *cudaArray_const_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
typedef struct cudaGraphEdgeData_st cudaGraphEdgeData;

enum cudaChannelFormatKind { cudaChannelFormatKindSigned = 0, cudaChannelFormatKindUnsigned = 1, cudaChannelFormatKindFloat = 2, cudaChannelFormatKindNone = 3 };
struct cudaChannelFormatDesc { int x, y, z, w; enum cudaChannelFormatKind f; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPos { size_t x, y, z; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };
struct cudaMemcpy3DParms {
    cudaArray_t srcArray;
    struct cudaPos srcPos;
    struct cudaPitchedPtr srcPtr;
    cudaArray_t dstArray;
    struct cudaPos dstPos;
    struct cudaPitchedPtr dstPtr;
    struct cudaExtent extent;
    enum cudaMemcpyKind kind;
};

enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1, cudaStreamCaptureStatusInvalidated = 2 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
enum cudaGraphExecUpdateResult { cudaGraphExecUpdateSuccess = 0, cudaGraphExecUpdateError = 1, cudaGraphExecUpdateErrorTopologyChanged = 2 };
typedef struct cudaGraphExecUpdateResultInfo_st {
    enum cudaGraphExecUpdateResult result;
    cudaGraphNode_t errorNode;
    cudaGraphNode_t errorFromNode;
} cudaGraphExecUpdateResultInfo;
struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim, blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
};
struct cudaMemsetParams {
    void *dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
};
struct cudaHostNodeParams {
    cudaHostFn_t fn;
    void *userData;
};
struct cudaHostNodeParamsV2 {
    cudaHostFn_t fn;
    void *userData;
};

enum cudaMemAllocationType { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType { cudaMemHandleTypeNone = 0 };
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation { enum cudaMemLocationType type; int id; };
enum cudaMemoryAdvise { cudaMemAdviseSetReadMostly = 1 };
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
struct cudaMemPoolProps {
    enum cudaMemAllocationType allocType;
    enum cudaMemAllocationHandleType handleTypes;
    struct cudaMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};
enum cudaMemPoolAttr {
    cudaMemPoolReuseFollowEventDependencies = 1, cudaMemPoolReuseAllowOpportunistic = 2,
    cudaMemPoolReuseAllowInternalDependencies = 3, cudaMemPoolAttrReleaseThreshold = 4,
    cudaMemPoolAttrReservedMemCurrent = 5, cudaMemPoolAttrReservedMemHigh = 6, cudaMemPoolAttrUsedMemCurrent = 7,
    cudaMemPoolAttrUsedMemHigh = 8
};

typedef enum cudaLaunchAttributeID { cudaLaunchAttributeIgnore = 0, cudaLaunchAttributeAccessPolicyWindow = 1,
                                     cudaLaunchAttributeCooperative = 2, cudaLaunchAttributeSynchronizationPolicy = 3,
                                     cudaLaunchAttributeClusterDimension = 4,
                                     cudaLaunchAttributeProgrammaticStreamSerialization = 6, cudaLaunchAttributePriority = 8 } cudaLaunchAttributeID;
enum cudaAccessProperty { cudaAccessPropertyNormal = 0, cudaAccessPropertyStreaming = 1, cudaAccessPropertyPersisting = 2 };
struct cudaAccessPolicyWindow {
    void *base_ptr;
    size_t num_bytes;
    float hitRatio;
    enum cudaAccessProperty hitProp;
    enum cudaAccessProperty missProp;
};
typedef union cudaLaunchAttributeValue {
    char pad[64];
    struct cudaAccessPolicyWindow accessPolicyWindow;
    int cooperative;
    struct { unsigned int x, y, z; } clusterDim;
    int priority;
    int programmaticStreamSerializationAllowed;
} cudaLaunchAttributeValue;
typedef cudaLaunchAttributeID cudaStreamAttrID;
typedef cudaLaunchAttributeValue cudaStreamAttrValue;
typedef struct cudaLaunchAttribute_st {
    cudaLaunchAttributeID id;
    char pad[8 - sizeof(cudaLaunchAttributeID)];
    cudaLaunchAttributeValue val;
} cudaLaunchAttribute;
typedef struct cudaLaunchConfig_st {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;

/* Conditional and memory nodes, cudaGraphAddNode (CUDA 12.3+). */
enum cudaGraphNodeType {
    cudaGraphNodeTypeKernel = 0x00, cudaGraphNodeTypeMemcpy = 0x01, cudaGraphNodeTypeMemset = 0x02,
    cudaGraphNodeTypeHost = 0x03, cudaGraphNodeTypeGraph = 0x04, cudaGraphNodeTypeEmpty = 0x05,
    cudaGraphNodeTypeMemAlloc = 0x0a, cudaGraphNodeTypeMemFree = 0x0b, cudaGraphNodeTypeConditional = 0x0d
};
typedef unsigned long long cudaGraphConditionalHandle;
enum cudaGraphConditionalHandleFlags { cudaGraphCondAssignDefault = 1 };
enum cudaGraphConditionalNodeType { cudaGraphCondTypeIf = 0, cudaGraphCondTypeWhile = 1, cudaGraphCondTypeSwitch = 2 };
struct cudaConditionalNodeParams {
    cudaGraphConditionalHandle handle;
    enum cudaGraphConditionalNodeType type;
    unsigned int size;
    cudaGraph_t *phGraph_out;
};
enum cudaMemAccessFlags { cudaMemAccessFlagsProtNone = 0, cudaMemAccessFlagsProtRead = 1, cudaMemAccessFlagsProtReadWrite = 3 };
struct cudaMemAccessDesc { struct cudaMemLocation location; enum cudaMemAccessFlags flags; };
struct cudaMemAllocNodeParams {
    struct cudaMemPoolProps poolProps;
    const struct cudaMemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    void *dptr;
};
struct cudaMemAllocNodeParamsV2 {
    struct cudaMemPoolProps poolProps;
    const struct cudaMemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    void *dptr;
};
struct cudaMemFreeNodeParams { void *dptr; };
struct cudaKernelNodeParamsV2 {
    void *func;
    dim3 gridDim, blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
};
struct cudaMemsetParamsV2 {
    void *dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
};
struct cudaMemcpyNodeParams {
    int flags;
    int reserved[3];
    struct cudaMemcpy3DParms copyParams;
};
struct cudaGraphNodeParams {
    enum cudaGraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        struct cudaKernelNodeParamsV2 kernel;
        struct cudaMemcpyNodeParams memcpy;
        struct cudaMemsetParamsV2 memset;
        struct cudaMemAllocNodeParamsV2 alloc;
        struct cudaMemFreeNodeParams free;
        struct cudaConditionalNodeParams conditional;
        struct cudaHostNodeParamsV2 host;
    };
    long long reserved2;
};
enum cudaGraphMemAttributeType {
    cudaGraphMemAttrUsedMemCurrent = 0x0, cudaGraphMemAttrUsedMemHigh = 0x1, cudaGraphMemAttrReservedMemCurrent = 0x2,
    cudaGraphMemAttrReservedMemHigh = 0x3
};
enum cudaStreamUpdateCaptureDependenciesFlags { cudaStreamAddCaptureDependencies = 0x0, cudaStreamSetCaptureDependencies = 0x1 };

typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;
typedef struct cudaMipmappedArray *cudaMipmappedArray_t;
enum cudaResourceType { cudaResourceTypeArray = 0, cudaResourceTypeMipmappedArray = 1, cudaResourceTypeLinear = 2, cudaResourceTypePitch2D = 3 };
struct cudaResourceDesc {
    enum cudaResourceType resType;
    union {
        struct { cudaArray_t array; } array;
        struct { cudaMipmappedArray_t mipmap; } mipmap;
        struct { void *devPtr; struct cudaChannelFormatDesc desc; size_t sizeInBytes; } linear;
        struct { void *devPtr; struct cudaChannelFormatDesc desc; size_t width, height, pitchInBytes; } pitch2D;
        struct { int reserved[32]; } reserved;
    } res;
    unsigned int flags;
};
enum cudaTextureAddressMode { cudaAddressModeWrap = 0, cudaAddressModeClamp = 1, cudaAddressModeMirror = 2, cudaAddressModeBorder = 3 };
enum cudaTextureFilterMode { cudaFilterModePoint = 0, cudaFilterModeLinear = 1 };
enum cudaTextureReadMode { cudaReadModeElementType = 0, cudaReadModeNormalizedFloat = 1 };
struct cudaTextureDesc {
    enum cudaTextureAddressMode addressMode[3];
    enum cudaTextureFilterMode filterMode;
    enum cudaTextureReadMode readMode;
    int sRGB;
    float borderColor[4];
    int normalizedCoords;
    unsigned int maxAnisotropy;
    enum cudaTextureFilterMode mipmapFilterMode;
    float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
    int disableTrilinearOptimization;
    int seamlessCubemap;
};
struct cudaResourceViewDesc {
    int format;
    size_t width, height, depth;
    unsigned int firstMipmapLevel, lastMipmapLevel, firstLayer, lastLayer;
    unsigned int reserved[16];
};

#endif

/* gpucloud's declarations of the driver-API families remoted by hand (issue 14): virtual memory,
 * memory pools, arrays and 3-D copies, texture and surface objects, graphs and stream capture,
 * launches with attributes. Types and values follow NVIDIA's cuda.h (same ABI), written from the
 * public API documentation. Included by cuda.h. */
#ifndef GPUCLOUD_CUDA_FAMILIES_H
#define GPUCLOUD_CUDA_FAMILIES_H

#ifdef __cplusplus
extern "C" {
#endif

/* More result codes. */
#define CUDA_ERROR_INVALID_ADDRESS_SPACE ((CUresult)717)
#define CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE ((CUresult)720)
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ((CUresult)900)
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ((CUresult)901)
#define CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ((CUresult)903)
#define CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE ((CUresult)910)

/* ---- virtual memory management ---- */
/* An edge's data in a captured graph (CUDA 12.3+); gpucloud captures plain edges only. */
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;

typedef unsigned long long CUmemGenericAllocationHandle;
typedef enum CUmemAllocationType_enum { CU_MEM_ALLOCATION_TYPE_INVALID = 0, CU_MEM_ALLOCATION_TYPE_PINNED = 1 } CUmemAllocationType;
typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE = 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1, CU_MEM_HANDLE_TYPE_WIN32 = 2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT = 4, CU_MEM_HANDLE_TYPE_FABRIC = 8
} CUmemAllocationHandleType;
typedef enum CUmemLocationType_enum { CU_MEM_LOCATION_TYPE_INVALID = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1 } CUmemLocationType;
typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0, CU_MEM_ACCESS_FLAGS_PROT_READ = 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;
typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;
typedef struct CUmemLocation_st { CUmemLocationType type; int id; } CUmemLocation;
typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
typedef struct CUmemAccessDesc_st { CUmemLocation location; CUmemAccess_flags flags; } CUmemAccessDesc;

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);

/* ---- stream-ordered allocation and memory pools ---- */
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH
} CUmemPool_attribute;
typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);

/* ---- arrays and 3-D copies ---- */
typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01, CU_AD_FORMAT_UNSIGNED_INT16 = 0x02, CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08, CU_AD_FORMAT_SIGNED_INT16 = 0x09, CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10, CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;
#define CUDA_ARRAY3D_LAYERED 0x01
#define CUDA_ARRAY3D_SURFACE_LDST 0x02
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width, Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width, Height, Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc);
CUresult cuArrayDestroy(CUarray arr);
CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *desc, CUarray arr);
CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray arr);
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *copy);
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *copy, CUstream stream);
CUresult cuMemcpyHtoA_v2(CUarray dst, size_t dstOffset, const void *src, size_t bytes);
CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t srcOffset, size_t bytes);
CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t dstOffset, const void *src, size_t bytes, CUstream stream);
CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t srcOffset, size_t bytes, CUstream stream);
CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t srcOffset, size_t bytes);
CUresult cuMemcpyDtoA_v2(CUarray dst, size_t dstOffset, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyAtoA_v2(CUarray dst, size_t dstOffset, CUarray src, size_t srcOffset, size_t bytes);

/* ---- texture and surface objects ---- */
typedef unsigned long long CUtexObject;
typedef unsigned long long CUsurfObject;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef enum CUresourcetype_enum {
    CU_RESOURCE_TYPE_ARRAY = 0, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY = 1, CU_RESOURCE_TYPE_LINEAR = 2,
    CU_RESOURCE_TYPE_PITCH2D = 3
} CUresourcetype;
typedef enum CUaddress_mode_enum {
    CU_TR_ADDRESS_MODE_WRAP = 0, CU_TR_ADDRESS_MODE_CLAMP = 1, CU_TR_ADDRESS_MODE_MIRROR = 2, CU_TR_ADDRESS_MODE_BORDER = 3
} CUaddress_mode;
typedef enum CUfilter_mode_enum { CU_TR_FILTER_MODE_POINT = 0, CU_TR_FILTER_MODE_LINEAR = 1 } CUfilter_mode;
typedef struct CUDA_RESOURCE_DESC_st {
    CUresourcetype resType;
    union {
        struct { CUarray hArray; } array;
        struct { CUmipmappedArray hMipmappedArray; } mipmap;
        struct { CUdeviceptr devPtr; CUarray_format format; unsigned int numChannels; size_t sizeInBytes; } linear;
        struct {
            CUdeviceptr devPtr;
            CUarray_format format;
            unsigned int numChannels;
            size_t width, height, pitchInBytes;
        } pitch2D;
        struct { int reserved[32]; } reserved;
    } res;
    unsigned int flags;
} CUDA_RESOURCE_DESC;
typedef struct CUDA_TEXTURE_DESC_st {
    CUaddress_mode addressMode[3];
    CUfilter_mode filterMode;
    unsigned int flags;
    unsigned int maxAnisotropy;
    CUfilter_mode mipmapFilterMode;
    float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
    float borderColor[4];
    int reserved[12];
} CUDA_TEXTURE_DESC;
typedef struct CUDA_RESOURCE_VIEW_DESC_st {
    int format; /* CUresourceViewFormat */
    size_t width, height, depth;
    unsigned int firstMipmapLevel, lastMipmapLevel, firstLayer, lastLayer;
    unsigned int reserved[16];
} CUDA_RESOURCE_VIEW_DESC;

CUresult cuTexObjectCreate(CUtexObject *obj, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                           const CUDA_RESOURCE_VIEW_DESC *view);
CUresult cuTexObjectDestroy(CUtexObject obj);
CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject obj);
CUresult cuSurfObjectCreate(CUsurfObject *obj, const CUDA_RESOURCE_DESC *res);
CUresult cuSurfObjectDestroy(CUsurfObject obj);

/* ---- graphs and stream capture ---- */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1, CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;
typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1, CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;
typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0, CU_GRAPH_NODE_TYPE_MEMCPY = 1, CU_GRAPH_NODE_TYPE_MEMSET = 2,
    CU_GRAPH_NODE_TYPE_HOST = 3, CU_GRAPH_NODE_TYPE_GRAPH = 4, CU_GRAPH_NODE_TYPE_EMPTY = 5
} CUgraphNodeType;
typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS = 0, CU_GRAPH_EXEC_UPDATE_ERROR = 1, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 3
} CUgraphExecUpdateResult;
typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;
typedef struct CUDA_KERNEL_NODE_PARAMS_st {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
} CUDA_MEMSET_NODE_PARAMS;
typedef void (*CUhostFn)(void *userData);
typedef struct CUDA_HOST_NODE_PARAMS_st { CUhostFn fn; void *userData; } CUDA_HOST_NODE_PARAMS;

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *graph);
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status);
CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
CUresult cuGraphCreate(CUgraph *graph, unsigned int flags);
CUresult cuGraphDestroy(CUgraph graph);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx);
CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMCPY3D *copy, CUcontext ctx);
CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps);
CUresult cuGraphAddHostNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                            const CUDA_HOST_NODE_PARAMS *params);
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec exec);
CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info);

/* Host functions and nodes, clones, changes to an executable graph's nodes (driver/graphstage.c). */
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *userData);
CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *userData, unsigned int flags);
CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *params);
CUresult cuGraphClone(CUgraph *clone, CUgraph graph);
CUresult cuGraphNodeFindInClone(CUgraphNode *node, CUgraphNode orig, CUgraph clone);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *params,
                                        CUcontext ctx);
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *copy, CUcontext ctx);
CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *params);

/* Conditional nodes, graph memory nodes, capture into a graph (CUDA 12.3+; driver/graphextras.c). */
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC ((CUgraphNodeType)10)
#define CU_GRAPH_NODE_TYPE_MEM_FREE ((CUgraphNodeType)11)
#define CU_GRAPH_NODE_TYPE_CONDITIONAL ((CUgraphNodeType)13)
typedef unsigned long long CUgraphConditionalHandle;
#define CU_GRAPH_COND_ASSIGN_DEFAULT 0x1
typedef enum CUgraphConditionalNodeType_enum {
    CU_GRAPH_COND_TYPE_IF = 0, CU_GRAPH_COND_TYPE_WHILE = 1, CU_GRAPH_COND_TYPE_SWITCH = 2
} CUgraphConditionalNodeType;
typedef struct CUDA_CONDITIONAL_NODE_PARAMS {
    CUgraphConditionalHandle handle;
    CUgraphConditionalNodeType type;
    unsigned int size;
    CUgraph *phGraph_out; /* the library's array, valid while the node lives */
    CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v1_st {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr; /* out */
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct CUDA_MEM_FREE_NODE_PARAMS_st { CUdeviceptr dptr; } CUDA_MEM_FREE_NODE_PARAMS;
typedef struct CUDA_MEMSET_NODE_PARAMS_v2_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
    CUcontext ctx;
} CUDA_MEMSET_NODE_PARAMS_v2;
typedef struct CUDA_MEMCPY_NODE_PARAMS_st {
    int flags, reserved;
    CUcontext copyCtx;
    CUDA_MEMCPY3D copyParams;
} CUDA_MEMCPY_NODE_PARAMS;
/* cuGraphAddNode's parameters: 256 bytes, the union at offset 16. */
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_KERNEL_NODE_PARAMS kernel; /* CUDA_KERNEL_NODE_PARAMS_v3's layout */
        CUDA_MEMCPY_NODE_PARAMS memcpy;
        CUDA_MEMSET_NODE_PARAMS_v2 memset;
        CUDA_MEM_ALLOC_NODE_PARAMS alloc;
        CUDA_MEM_FREE_NODE_PARAMS free;
        CUDA_CONDITIONAL_NODE_PARAMS conditional;
        CUDA_HOST_NODE_PARAMS host; /* CUDA_HOST_NODE_PARAMS_v2 begins so */
    };
    long long reserved2;
} CUgraphNodeParams;
typedef enum CUgraphMem_attribute_enum {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3
} CUgraphMem_attribute;
typedef enum CUstreamUpdateCaptureDependencies_flags_enum {
    CU_STREAM_ADD_CAPTURE_DEPENDENCIES = 0x0, CU_STREAM_SET_CAPTURE_DEPENDENCIES = 0x1
} CUstreamUpdateCaptureDependencies_flags;

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *handle, CUgraph graph, CUcontext ctx,
                                        unsigned int defaultLaunchValue, unsigned int flags);
CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                           size_t ndeps, CUgraphNodeParams *params);
CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *params);
CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr);
CUresult cuDeviceGraphMemTrim(CUdevice dev);
CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value);
CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value);
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t ndeps, CUstreamCaptureMode mode);
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
                                              unsigned int flags);

/* ---- launches with attributes ---- */
typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE = 0, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1, CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
    CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY = 3, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6, CU_LAUNCH_ATTRIBUTE_PRIORITY = 8,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP = 9, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN = 10
} CUlaunchAttributeID;
typedef enum CUaccessProperty_enum {
    CU_ACCESS_PROPERTY_NORMAL = 0, CU_ACCESS_PROPERTY_STREAMING = 1, CU_ACCESS_PROPERTY_PERSISTING = 2
} CUaccessProperty;
typedef struct CUaccessPolicyWindow_st {
    void *base_ptr;
    size_t num_bytes;
    float hitRatio;
    CUaccessProperty hitProp;
    CUaccessProperty missProp;
} CUaccessPolicyWindow;
typedef enum CUsynchronizationPolicy_enum {
    CU_SYNC_POLICY_AUTO = 1, CU_SYNC_POLICY_SPIN = 2, CU_SYNC_POLICY_YIELD = 3, CU_SYNC_POLICY_BLOCKING_SYNC = 4
} CUsynchronizationPolicy;
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    CUaccessPolicyWindow accessPolicyWindow;
    int cooperative;
    struct { unsigned int x, y, z; } clusterDim;
    int priority;
    CUsynchronizationPolicy syncPolicy;
    struct { unsigned char default_, remote; } memSyncDomainMap;
    int memSyncDomain;
    int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef CUlaunchAttributeID CUstreamAttrID;
typedef CUlaunchAttributeValue CUstreamAttrValue;
CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue *value);
CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *value);
CUresult cuStreamGetPriority(CUstream s, int *priority);
typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream s, void **params);

/* ---- pointer attributes ---- */
typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1, CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6, CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12, CU_POINTER_ATTRIBUTE_MAPPED = 13, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS = 16,
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
} CUpointer_attribute;
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr);

/* ---- stream memory operations ---- */
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WAIT_VALUE_EQ 0x1
#define CU_STREAM_WAIT_VALUE_AND 0x2
#define CU_STREAM_WAIT_VALUE_NOR 0x3
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0
typedef enum CUstreamBatchMemOpType_enum {
    CU_STREAM_MEM_OP_WAIT_VALUE_32 = 1, CU_STREAM_MEM_OP_WRITE_VALUE_32 = 2, CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES = 3,
    CU_STREAM_MEM_OP_WAIT_VALUE_64 = 4, CU_STREAM_MEM_OP_WRITE_VALUE_64 = 5, CU_STREAM_MEM_OP_BARRIER = 6
} CUstreamBatchMemOpType;
typedef union CUstreamBatchMemOpParams_union {
    CUstreamBatchMemOpType operation;
    struct {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union { cuuint32_t value; cuuint64_t value64; };
        unsigned int flags;
        CUdeviceptr alias;
    } waitValue, writeValue;
    cuuint64_t pad[6];
} CUstreamBatchMemOpParams;
CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags);

/* ---- Hopper tensor maps ---- */
#define CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
    _Alignas(64) cuuint64_t opaque[CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;
typedef enum CUtensorMapDataType_enum {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16, CU_TENSOR_MAP_DATA_TYPE_UINT32,
    CU_TENSOR_MAP_DATA_TYPE_INT32, CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_INT64,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ
} CUtensorMapDataType;
typedef enum CUtensorMapInterleave_enum { CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_INTERLEAVE_16B, CU_TENSOR_MAP_INTERLEAVE_32B } CUtensorMapInterleave;
typedef enum CUtensorMapSwizzle_enum {
    CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B
} CUtensorMapSwizzle;
typedef enum CUtensorMapL2promotion_enum {
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B
} CUtensorMapL2promotion;
typedef enum CUtensorMapFloatOOBfill_enum {
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
} CUtensorMapFloatOOBfill;
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);
CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                 const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const int *lower,
                                 const int *upper, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);

/* ---- JIT linking (in the worker) ---- */
typedef struct CUlinkState_st *CUlinkState;
typedef enum CUjitInputType_enum {
    CU_JIT_INPUT_CUBIN = 0, CU_JIT_INPUT_PTX = 1, CU_JIT_INPUT_FATBINARY = 2, CU_JIT_INPUT_OBJECT = 3,
    CU_JIT_INPUT_LIBRARY = 4
} CUjitInputType;
CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *state);
CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                          unsigned int numOptions, CUjit_option *options, void **optionValues);
CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                          CUjit_option *options, void **optionValues);
CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut);
CUresult cuLinkDestroy(CUlinkState state);

/* The older forms the library also exports (a binary built against an older header calls them). */
#ifdef GPUCLOUD_GUEST_IMPL
CUresult cuStreamBeginCapture(CUstream s);
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id);
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *ndeps);
CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t log_n);
CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t log_n);
CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode *err, CUgraphExecUpdateResult *result);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags);
CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *state);
CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                       unsigned int numOptions, CUjit_option *options, void **optionValues);
CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
                       CUjit_option *options, void **optionValues);
CUresult cuGraphAddNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, CUgraphNodeParams *params);
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, size_t ndeps, unsigned int flags);
#endif

/* The names programs call, mapped to the current ABI as NVIDIA's header maps them. */
#ifndef GPUCLOUD_GUEST_IMPL
#define cuArrayCreate cuArrayCreate_v2
#define cuArray3DCreate cuArray3DCreate_v2
#define cuArrayGetDescriptor cuArrayGetDescriptor_v2
#define cuArray3DGetDescriptor cuArray3DGetDescriptor_v2
#define cuMemcpy3D cuMemcpy3D_v2
#define cuMemcpy3DAsync cuMemcpy3DAsync_v2
#define cuMemcpyHtoA cuMemcpyHtoA_v2
#define cuMemcpyAtoH cuMemcpyAtoH_v2
#define cuMemcpyHtoAAsync cuMemcpyHtoAAsync_v2
#define cuMemcpyAtoHAsync cuMemcpyAtoHAsync_v2
#define cuMemcpyAtoD cuMemcpyAtoD_v2
#define cuMemcpyDtoA cuMemcpyDtoA_v2
#define cuMemcpyAtoA cuMemcpyAtoA_v2
#define cuStreamBeginCapture cuStreamBeginCapture_v2
#define cuStreamGetCaptureInfo cuStreamGetCaptureInfo_v3
#define cuGraphExecUpdate cuGraphExecUpdate_v2
#define cuGraphAddKernelNode cuGraphAddKernelNode_v2
#define cuGraphExecKernelNodeSetParams cuGraphExecKernelNodeSetParams_v2
#define cuGraphInstantiate cuGraphInstantiateWithFlags
#define cuGraphAddNode cuGraphAddNode_v2
#define cuStreamUpdateCaptureDependencies cuStreamUpdateCaptureDependencies_v2
#define cuStreamWaitValue32 cuStreamWaitValue32_v2
#define cuStreamWaitValue64 cuStreamWaitValue64_v2
#define cuStreamWriteValue32 cuStreamWriteValue32_v2
#define cuStreamWriteValue64 cuStreamWriteValue64_v2
#define cuStreamBatchMemOp cuStreamBatchMemOp_v2
#define cuLinkCreate cuLinkCreate_v2
#define cuLinkAddData cuLinkAddData_v2
#define cuLinkAddFile cuLinkAddFile_v2
#endif

/* Managed memory's hints (driver/managed.c). */
CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream);
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, int advice, CUdevice device);
CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, int advice, CUmemLocation location);

#ifdef __cplusplus
}
#endif
#endif

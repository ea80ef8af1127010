/* The runtime's side of the hand-written driver-API families: graphs and stream capture,
 * stream-ordered allocation and pools, cooperative and attributed launches, arrays and 3-D
 * copies. Each is a layer over the driver API (gpucloud's libcuda.so.1 in a VM, NVIDIA's natively). */
#include "internal.h"

#include <stdint.h>
#include <string.h>

#define STREAM(s) ((CUstream)(s))

/* ---- stream attributes: hints the driver layer keeps (guest/driver/streamattr.c) ---- */

/* cudaStreamAttrValue is cudaLaunchAttributeValue, the driver's CUlaunchAttributeValue byte for
 * byte, with the same attribute numbers. The _ptsz forms name the per-thread default stream. */
EXPORT cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID attr, const cudaStreamAttrValue *v) {
    READY();
    return ret(cuStreamSetAttribute(STREAM(s), (CUstreamAttrID)attr, (const CUstreamAttrValue *)v));
}

EXPORT cudaError_t cudaStreamGetAttribute(cudaStream_t s, cudaStreamAttrID attr, cudaStreamAttrValue *v) {
    READY();
    return ret(cuStreamGetAttribute(STREAM(s), (CUstreamAttrID)attr, (CUstreamAttrValue *)v));
}

EXPORT cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID attr, const cudaStreamAttrValue *v) {
    READY();
    return ret(cuStreamSetAttribute(s ? STREAM(s) : CU_STREAM_PER_THREAD, (CUstreamAttrID)attr,
                                    (const CUstreamAttrValue *)v));
}

EXPORT cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID attr, cudaStreamAttrValue *v) {
    READY();
    return ret(cuStreamGetAttribute(s ? STREAM(s) : CU_STREAM_PER_THREAD, (CUstreamAttrID)attr, (CUstreamAttrValue *)v));
}

/* ---- stream capture and graphs ---- */

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    READY();
    return ret(cuStreamBeginCapture(STREAM(s), (CUstreamCaptureMode)mode));
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    READY();
    return ret(cuStreamEndCapture(STREAM(s), (CUgraph *)graph));
}

EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    READY();
    return ret(cuStreamIsCapturing(STREAM(s), (CUstreamCaptureStatus *)status));
}

/* The capture's graph and dependencies are not offered (NULL, none); edges never. */
EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                            cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                            const cudaGraphEdgeData **edges, size_t *ndeps) {
    READY();
    if (edges) *edges = NULL;
    return ret(cuStreamGetCaptureInfo(STREAM(s), (CUstreamCaptureStatus *)status, (cuuint64_t *)id, (CUgraph *)graph,
                                      (const CUgraphNode **)deps, NULL, ndeps));
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    return ret(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned flags) {
    READY();
    return ret(cuGraphCreate((CUgraph *)graph, flags));
}

EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return ret(cuGraphDestroy((CUgraph)graph)); }

EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n) {
    return ret(cuGraphAddEmptyNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n));
}

CUresult kernel_node_params(const struct cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS *k) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f;
    CUresult rc = function(p->func, &f);
    if (rc != CUDA_SUCCESS) return rc;
    memset(k, 0, sizeof *k);
    k->func = f;
    k->gridDimX = p->gridDim.x, k->gridDimY = p->gridDim.y, k->gridDimZ = p->gridDim.z;
    k->blockDimX = p->blockDim.x, k->blockDimY = p->blockDim.y, k->blockDimZ = p->blockDim.z;
    k->sharedMemBytes = p->sharedMemBytes, k->kernelParams = p->kernelParams, k->extra = p->extra;
    return CUDA_SUCCESS;
}

EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                          const struct cudaKernelNodeParams *p) {
    READY();
    CUDA_KERNEL_NODE_PARAMS k;
    CUresult rc = kernel_node_params(p, &k);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphAddKernelNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &k));
}

CUresult memset_node_params(const struct cudaMemsetParams *p, CUDA_MEMSET_NODE_PARAMS *m, CUcontext *ctx) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = ready();
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuCtxGetCurrent(ctx);
    if (rc != CUDA_SUCCESS) return rc;
    *m = (CUDA_MEMSET_NODE_PARAMS){.dst = (CUdeviceptr)(uintptr_t)p->dst, .pitch = p->pitch, .value = p->value,
                                   .elementSize = p->elementSize, .width = p->width, .height = p->height};
    return CUDA_SUCCESS;
}

EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                          const struct cudaMemsetParams *p) {
    CUDA_MEMSET_NODE_PARAMS m;
    CUcontext ctx;
    CUresult rc = memset_node_params(p, &m, &ctx);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphAddMemsetNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &m, ctx));
}

EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *n) {
    return ret(cuGraphGetNodes((CUgraph)graph, (CUgraphNode *)nodes, n));
}

EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    READY();
    return ret(cuGraphInstantiateWithFlags((CUgraphExec *)exec, (CUgraph)graph, flags));
}

EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    return cudaGraphInstantiate(exec, graph, flags);
}

EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    READY();
    return ret(cuGraphLaunch((CUgraphExec)exec, STREAM(s)));
}

EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return ret(cuGraphExecDestroy((CUgraphExec)exec)); }

EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info) {
    return ret(cuGraphExecUpdate((CUgraphExec)exec, (CUgraph)graph, (CUgraphExecUpdateResultInfo *)info));
}

/* ---- conditional and memory nodes, cudaGraphAddNode, capture into a graph ---- */

EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *handle, cudaGraph_t graph,
                                                    unsigned int defaultLaunchValue, unsigned int flags) {
    READY();
    CUcontext ctx;
    CUresult rc = cuCtxGetCurrent(&ctx);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphConditionalHandleCreate((CUgraphConditionalHandle *)handle, (CUgraph)graph, ctx,
                                              defaultLaunchValue, flags));
}

/* cudaMemAllocNodeParams and its V2 are CUDA_MEM_ALLOC_NODE_PARAMS byte for byte (the pool
 * properties and access descriptors are the driver's too). */
static CUresult mem_alloc_node(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                               struct cudaMemAllocNodeParams *p) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEM_ALLOC_NODE_PARAMS d;
    memset(&d, 0, sizeof d);
    memcpy(&d.poolProps, &p->poolProps, sizeof d.poolProps);
    d.accessDescs = (const CUmemAccessDesc *)p->accessDescs, d.accessDescCount = p->accessDescCount;
    d.bytesize = p->bytesize;
    CUresult rc = cuGraphAddMemAllocNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &d);
    if (rc == CUDA_SUCCESS) p->dptr = (void *)(uintptr_t)d.dptr;
    return rc;
}

EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t n, struct cudaMemAllocNodeParams *p) {
    READY();
    return ret(mem_alloc_node(node, graph, deps, n, p));
}

EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                           size_t n, void *dptr) {
    READY();
    return ret(cuGraphAddMemFreeNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n,
                                     (CUdeviceptr)(uintptr_t)dptr));
}

/* A conditional node through the driver's cuGraphAddNode; its body graphs stay the driver
 * library's (valid while the node lives). */
static CUresult conditional_node(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                 struct cudaConditionalNodeParams *p) {
    CUgraphNodeParams d;
    memset(&d, 0, sizeof d);
    d.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    CUresult rc = cuCtxGetCurrent(&d.conditional.ctx);
    if (rc != CUDA_SUCCESS) return rc;
    d.conditional.handle = p->handle, d.conditional.type = (CUgraphConditionalNodeType)p->type;
    d.conditional.size = p->size;
    rc = cuGraphAddNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, NULL, n, &d);
    if (rc == CUDA_SUCCESS) p->phGraph_out = (cudaGraph_t *)d.conditional.phGraph_out;
    return rc;
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                   const struct cudaMemcpy3DParms *p); /* below, with the 3-D copies */
cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                 const struct cudaHostNodeParams *p); /* graphedits.c */

/* Each node type through its own runtime call; edges beyond the default are not offered. */
EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    const cudaGraphEdgeData *edges, size_t n, struct cudaGraphNodeParams *p) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    static const unsigned char zero[8];
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp((const unsigned char *)edges + 8 * i, zero, 8) != 0) return ret(CUDA_ERROR_NOT_SUPPORTED);
    READY();
    switch (p->type) {
    case cudaGraphNodeTypeKernel: {
        struct cudaKernelNodeParams k = {.func = p->kernel.func, .gridDim = p->kernel.gridDim,
                                         .blockDim = p->kernel.blockDim, .sharedMemBytes = p->kernel.sharedMemBytes,
                                         .kernelParams = p->kernel.kernelParams, .extra = p->kernel.extra};
        return cudaGraphAddKernelNode(node, graph, deps, n, &k);
    }
    case cudaGraphNodeTypeMemset: {
        struct cudaMemsetParams m = {.dst = p->memset.dst, .pitch = p->memset.pitch, .value = p->memset.value,
                                     .elementSize = p->memset.elementSize, .width = p->memset.width,
                                     .height = p->memset.height};
        return cudaGraphAddMemsetNode(node, graph, deps, n, &m);
    }
    case cudaGraphNodeTypeMemcpy:
        return cudaGraphAddMemcpyNode(node, graph, deps, n, &p->memcpy.copyParams);
    case cudaGraphNodeTypeEmpty:
        return cudaGraphAddEmptyNode(node, graph, deps, n);
    case cudaGraphNodeTypeMemAlloc:
        return ret(mem_alloc_node(node, graph, deps, n, (struct cudaMemAllocNodeParams *)&p->alloc));
    case cudaGraphNodeTypeMemFree:
        return cudaGraphAddMemFreeNode(node, graph, deps, n, p->free.dptr);
    case cudaGraphNodeTypeConditional:
        return ret(conditional_node(node, graph, deps, n, &p->conditional));
    case cudaGraphNodeTypeHost: {
        struct cudaHostNodeParams h = {.fn = p->host.fn, .userData = p->host.userData};
        return cudaGraphAddHostNode(node, graph, deps, n, &h);
    }
    default:
        return ret(CUDA_ERROR_NOT_SUPPORTED);
    }
}

EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                 const cudaGraphEdgeData *edges, size_t n,
                                                 enum cudaStreamCaptureMode mode) {
    READY();
    return ret(cuStreamBeginCaptureToGraph(STREAM(s), (CUgraph)graph, (const CUgraphNode *)deps,
                                           (const CUgraphEdgeData *)edges, n, (CUstreamCaptureMode)mode));
}

EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps,
                                                       const cudaGraphEdgeData *edges, size_t n, unsigned int flags) {
    READY();
    return ret(cuStreamUpdateCaptureDependencies(STREAM(s), (CUgraphNode *)deps, (const CUgraphEdgeData *)edges, n,
                                                 flags));
}

/* The _ptsz forms: a NULL stream is the thread's per-thread default stream. */
EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                                      const cudaGraphEdgeData *edges, size_t n,
                                                      enum cudaStreamCaptureMode mode) {
    return cudaStreamBeginCaptureToGraph(s ? s : (cudaStream_t)CU_STREAM_PER_THREAD, graph, deps, edges, n, mode);
}

EXPORT cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t s, cudaGraphNode_t *deps,
                                                            const cudaGraphEdgeData *edges, size_t n,
                                                            unsigned int flags) {
    return cudaStreamUpdateCaptureDependencies(s ? s : (cudaStream_t)CU_STREAM_PER_THREAD, deps, edges, n, flags);
}

/* The device's graph memory: its ordinal is the driver's device. */
EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) {
    READY();
    CUdevice d;
    CUresult rc = cuDeviceGet(&d, device);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceGraphMemTrim(d));
}

EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value) {
    READY();
    CUdevice d;
    CUresult rc = cuDeviceGet(&d, device);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceGetGraphMemAttribute(d, (CUgraphMem_attribute)attr, value));
}

EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value) {
    READY();
    CUdevice d;
    CUresult rc = cuDeviceGet(&d, device);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceSetGraphMemAttribute(d, (CUgraphMem_attribute)attr, value));
}

/* ---- stream-ordered allocation and pools ---- */

EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    return ret(cuMemAllocFromPoolAsync((CUdeviceptr *)p, n, (CUmemoryPool)pool, STREAM(s)));
}

EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props) {
    READY();
    return ret(cuMemPoolCreate((CUmemoryPool *)pool, (const CUmemPoolProps *)props));
}

EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return ret(cuMemPoolDestroy((CUmemoryPool)pool)); }

EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *v) {
    return ret(cuMemPoolSetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, v));
}

EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *v) {
    return ret(cuMemPoolGetAttribute((CUmemoryPool)pool, (CUmemPool_attribute)attr, v));
}

EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
    return ret(cuMemPoolTrimTo((CUmemoryPool)pool, keep));
}

/* The device's pools: the driver answers for the current context's device. */
static CUresult on_device(int dev, CUdevice *d) {
    if (dev != cur_dev) return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = ready();
    if (rc == CUDA_SUCCESS) rc = cuDeviceGet(d, dev);
    return rc;
}

EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev) {
    CUdevice d;
    CUresult rc = on_device(dev, &d);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceGetDefaultMemPool((CUmemoryPool *)pool, d));
}

EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int dev) {
    CUdevice d;
    CUresult rc = on_device(dev, &d);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceGetMemPool((CUmemoryPool *)pool, d));
}

EXPORT cudaError_t cudaDeviceSetMemPool(int dev, cudaMemPool_t pool) {
    CUdevice d;
    CUresult rc = on_device(dev, &d);
    return ret(rc != CUDA_SUCCESS ? rc : cuDeviceSetMemPool(d, (CUmemoryPool)pool));
}

/* ---- cooperative and attributed launches ---- */

EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                               cudaStream_t s) {
    READY();
    CUfunction f;
    CUresult rc = function(func, &f);
    if (rc == CUDA_SUCCESS)
        rc = cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared,
                                       STREAM(s), args);
    return ret(rc);
}

/* cudaLaunchAttribute is laid out as CUlaunchAttribute (an id, padding, a 64-byte value). */
EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args) {
    if (!c) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUfunction f;
    CUresult rc = function(func, &f);
    if (rc != CUDA_SUCCESS) return ret(rc);
    CUlaunchConfig lc = {.gridDimX = c->gridDim.x, .gridDimY = c->gridDim.y, .gridDimZ = c->gridDim.z,
                         .blockDimX = c->blockDim.x, .blockDimY = c->blockDim.y, .blockDimZ = c->blockDim.z,
                         .sharedMemBytes = (unsigned)c->dynamicSmemBytes, .hStream = STREAM(c->stream),
                         .attrs = (CUlaunchAttribute *)c->attrs, .numAttrs = c->numAttrs};
    return ret(cuLaunchKernelEx(&lc, f, args, NULL));
}

/* ---- arrays and 3-D copies ---- */

/* The driver's format and channel count of a channel description: equal channel sizes of 8, 16 or
 * 32 bits; signed, unsigned or float. */
static CUresult format_of(const struct cudaChannelFormatDesc *d, CUarray_format *f, unsigned *channels) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    int bits = d->x;
    unsigned n = 0;
    for (const int *c = &d->x; c <= &d->w; c++) {
        if (*c == 0) break;
        if (*c != bits) return CUDA_ERROR_INVALID_VALUE;
        n++;
    }
    if (n == 0 || n == 3) return CUDA_ERROR_INVALID_VALUE;
    *channels = n;
    switch (d->f) {
    case cudaChannelFormatKindSigned:
        *f = bits == 8 ? CU_AD_FORMAT_SIGNED_INT8 : bits == 16 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
        break;
    case cudaChannelFormatKindUnsigned:
        *f = bits == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : bits == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
        break;
    case cudaChannelFormatKindFloat:
        if (bits != 16 && bits != 32) return CUDA_ERROR_INVALID_VALUE;
        *f = bits == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return bits == 8 || bits == 16 || bits == 32 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static cudaError_t make_array(cudaArray_t *a, const struct cudaChannelFormatDesc *desc, size_t w, size_t h, size_t d,
                              unsigned flags) {
    if (!a) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = w, .Height = h, .Depth = d, .Flags = flags};
    CUresult rc = format_of(desc, &ad.Format, &ad.NumChannels);
    if (rc == CUDA_SUCCESS) rc = cuArray3DCreate((CUarray *)a, &ad);
    return ret(rc);
}

EXPORT cudaError_t cudaMallocArray(cudaArray_t *a, const struct cudaChannelFormatDesc *desc, size_t w, size_t h,
                                   unsigned flags) {
    return make_array(a, desc, w, h, 0, flags);
}

EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *a, const struct cudaChannelFormatDesc *desc, struct cudaExtent e,
                                     unsigned flags) {
    return make_array(a, desc, e.width, e.height, e.depth, flags);
}

EXPORT cudaError_t cudaFreeArray(cudaArray_t a) {
    if (!a) return cudaSuccess;
    return ret(cuArrayDestroy((CUarray)a));
}

/* Pitched 3-D memory: rows padded to the driver's pitch, height * depth of them. */
EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent e) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdeviceptr d;
    size_t pitch;
    CUresult rc = cuMemAllocPitch(&d, &pitch, e.width, e.height * (e.depth ? e.depth : 1), 4);
    if (rc == CUDA_SUCCESS) *p = (struct cudaPitchedPtr){(void *)(uintptr_t)d, pitch, e.width, e.height};
    return ret(rc);
}

/* The memory type of a pointer side of a copy of kind k. */
static CUmemorytype side_type(enum cudaMemcpyKind k, int src) {
    switch (k) {
    case cudaMemcpyHostToHost: return CU_MEMORYTYPE_HOST;
    case cudaMemcpyHostToDevice: return src ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    case cudaMemcpyDeviceToHost: return src ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    case cudaMemcpyDeviceToDevice: return CU_MEMORYTYPE_DEVICE;
    default: return CU_MEMORYTYPE_UNIFIED;
    }
}

/* Bytes of one element of array a. */
static CUresult element_bytes(cudaArray_const_t a, size_t *n) {
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = cuArray3DGetDescriptor((CUDA_ARRAY3D_DESCRIPTOR *)&d, (CUarray)(uintptr_t)a);
    if (rc != CUDA_SUCCESS) return rc;
    size_t b = d.Format == CU_AD_FORMAT_UNSIGNED_INT8 || d.Format == CU_AD_FORMAT_SIGNED_INT8     ? 1
               : d.Format == CU_AD_FORMAT_UNSIGNED_INT16 || d.Format == CU_AD_FORMAT_SIGNED_INT16 ||
                       d.Format == CU_AD_FORMAT_HALF
                   ? 2
                   : 4;
    *n = b * d.NumChannels;
    return CUDA_SUCCESS;
}

/* The driver's description of the runtime's 3-D copy p. */
static CUresult copy3d_params(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c) {
    if (!p || (p->srcArray && p->srcPtr.ptr) || (p->dstArray && p->dstPtr.ptr)) return CUDA_ERROR_INVALID_VALUE;
    memset(c, 0, sizeof *c);
    size_t elem = 1; /* with an array, widths and x positions count elements */
    CUresult rc = CUDA_SUCCESS;
    if (p->srcArray) rc = element_bytes(p->srcArray, &elem);
    else if (p->dstArray) rc = element_bytes(p->dstArray, &elem);
    if (rc != CUDA_SUCCESS) return rc;
    if (p->srcArray) c->srcMemoryType = CU_MEMORYTYPE_ARRAY, c->srcArray = (CUarray)p->srcArray;
    else {
        c->srcMemoryType = side_type(p->kind, 1);
        c->srcHost = p->srcPtr.ptr, c->srcDevice = (CUdeviceptr)(uintptr_t)p->srcPtr.ptr;
        c->srcPitch = p->srcPtr.pitch, c->srcHeight = p->srcPtr.ysize;
    }
    if (p->dstArray) c->dstMemoryType = CU_MEMORYTYPE_ARRAY, c->dstArray = (CUarray)p->dstArray;
    else {
        c->dstMemoryType = side_type(p->kind, 0);
        c->dstHost = p->dstPtr.ptr, c->dstDevice = (CUdeviceptr)(uintptr_t)p->dstPtr.ptr;
        c->dstPitch = p->dstPtr.pitch, c->dstHeight = p->dstPtr.ysize;
    }
    c->srcXInBytes = p->srcPos.x * elem, c->srcY = p->srcPos.y, c->srcZ = p->srcPos.z;
    c->dstXInBytes = p->dstPos.x * elem, c->dstY = p->dstPos.y, c->dstZ = p->dstPos.z;
    c->WidthInBytes = p->extent.width * elem, c->Height = p->extent.height, c->Depth = p->extent.depth;
    return CUDA_SUCCESS;
}

static cudaError_t copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t s, int async) {
    READY();
    CUDA_MEMCPY3D c;
    CUresult rc = copy3d_params(p, &c);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(async ? cuMemcpy3DAsync(&c, STREAM(s)) : cuMemcpy3D(&c));
}

/* A graph's copy node: host sides go through bounce buffers (driver/graphhost.c). */
/* A copy node's parameters and the current context the driver's node calls take. */
static CUresult node_copy(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c, CUcontext *ctx) {
    CUresult rc = copy3d_params(p, c);
    return rc == CUDA_SUCCESS ? cuCtxGetCurrent(ctx) : rc;
}

EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                          const struct cudaMemcpy3DParms *p) {
    READY();
    CUDA_MEMCPY3D c;
    CUcontext ctx;
    CUresult rc = node_copy(p, &c, &ctx);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphAddMemcpyNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &c, ctx));
}

EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemcpy3DParms *p) {
    READY();
    CUDA_MEMCPY3D c;
    CUcontext ctx;
    CUresult rc = node_copy(p, &c, &ctx);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphExecMemcpyNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &c, ctx));
}

/* The 1-D form: count bytes between device addresses (cudaMemcpyDefault or DeviceToDevice). */
EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t n, void *dst, const void *src, size_t count,
                                            enum cudaMemcpyKind kind) {
    struct cudaMemcpy3DParms p = {.srcPtr = {(void *)src, count, count, 1}, .dstPtr = {dst, count, count, 1},
                                  .extent = {count, 1, 1}, .kind = kind};
    return cudaGraphAddMemcpyNode(node, graph, deps, n, &p);
}

EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) { return copy3d(p, NULL, 0); }
EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s) { return copy3d(p, s, 1); }

EXPORT cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t spitch, size_t width,
                                       size_t height, enum cudaMemcpyKind kind) {
    READY();
    CUDA_MEMCPY2D c = {.srcMemoryType = side_type(kind, 1), .srcHost = src, .srcDevice = (CUdeviceptr)(uintptr_t)src,
                       .srcPitch = spitch, .dstXInBytes = x, .dstY = y, .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                       .dstArray = (CUarray)dst, .WidthInBytes = width, .Height = height};
    return ret(cuMemcpy2D(&c));
}

EXPORT cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t x, size_t y,
                                         size_t width, size_t height, enum cudaMemcpyKind kind) {
    READY();
    CUDA_MEMCPY2D c = {.srcXInBytes = x, .srcY = y, .srcMemoryType = CU_MEMORYTYPE_ARRAY,
                       .srcArray = (CUarray)(uintptr_t)src, .dstMemoryType = side_type(kind, 0), .dstHost = dst,
                       .dstDevice = (CUdeviceptr)(uintptr_t)dst, .dstPitch = dpitch, .WidthInBytes = width,
                       .Height = height};
    return ret(cuMemcpy2D(&c));
}

/* The deprecated linear copies to and from an array (cudaMemcpyToArray, cudaMemcpyFromArray, still
 * used by the texture samples): count bytes from byte x of row y on, row after row of the array's
 * width, as at most three 2-D copies (the rest of the first row, whole rows, the start of the last). */
static cudaError_t linear_array_copy(cudaArray_const_t a, size_t x, size_t y, char *p, size_t count,
                                     enum cudaMemcpyKind kind, int to_array) {
    READY();
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t elem;
    CUresult rc = cuArray3DGetDescriptor(&d, (CUarray)(uintptr_t)a);
    if (rc == CUDA_SUCCESS) rc = element_bytes(a, &elem);
    if (rc != CUDA_SUCCESS) return ret(rc);
    size_t row = d.Width * elem;
    if (count && x >= row) return ret(CUDA_ERROR_INVALID_VALUE);
    while (count && rc == CUDA_SUCCESS) {
        size_t w = row - x < count ? row - x : count, h = 1;
        if (x == 0 && count >= row) w = row, h = count / row;
        CUDA_MEMCPY2D c = {.WidthInBytes = w, .Height = h};
        if (to_array) {
            c.srcMemoryType = side_type(kind, 1), c.srcHost = p, c.srcDevice = (CUdeviceptr)(uintptr_t)p, c.srcPitch = w;
            c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = (CUarray)(uintptr_t)a, c.dstXInBytes = x, c.dstY = y;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = (CUarray)(uintptr_t)a, c.srcXInBytes = x, c.srcY = y;
            c.dstMemoryType = side_type(kind, 0), c.dstHost = p, c.dstDevice = (CUdeviceptr)(uintptr_t)p, c.dstPitch = w;
        }
        rc = cuMemcpy2D(&c);
        p += w * h, count -= w * h, x += w;
        if (x == row) x = 0, y += h;
    }
    return ret(rc);
}

EXPORT cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t count,
                                     enum cudaMemcpyKind kind) {
    return linear_array_copy(dst, x, y, (char *)(uintptr_t)src, count, kind, 1);
}

EXPORT cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                       enum cudaMemcpyKind kind) {
    return linear_array_copy(src, x, y, dst, count, kind, 0);
}

/* ---- texture and surface objects ---- */

/* Pure host computation: the description of a channel of x, y, z, w bits of kind f. NVIDIA's
 * returns the struct by value, as here (a generated stub returning an int would leave the caller's
 * struct as garbage, so runtime.ann marks it "hand"). */
EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f) {
    return (struct cudaChannelFormatDesc){x, y, z, w, f};
}

/* The channel description of a driver format and channel count (format_of's inverse). */
static struct cudaChannelFormatDesc channels_of(CUarray_format f, unsigned n) {
    int bits = f == CU_AD_FORMAT_UNSIGNED_INT8 || f == CU_AD_FORMAT_SIGNED_INT8     ? 8
               : f == CU_AD_FORMAT_UNSIGNED_INT16 || f == CU_AD_FORMAT_SIGNED_INT16 || f == CU_AD_FORMAT_HALF ? 16
                                                                                                              : 32;
    enum cudaChannelFormatKind k = f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_FLOAT ? cudaChannelFormatKindFloat
                                   : f == CU_AD_FORMAT_SIGNED_INT8 || f == CU_AD_FORMAT_SIGNED_INT16 ||
                                           f == CU_AD_FORMAT_SIGNED_INT32
                                       ? cudaChannelFormatKindSigned
                                       : cudaChannelFormatKindUnsigned;
    return (struct cudaChannelFormatDesc){bits, n > 1 ? bits : 0, n > 2 ? bits : 0, n > 3 ? bits : 0, k};
}

static CUresult resource_to_driver(const struct cudaResourceDesc *r, CUDA_RESOURCE_DESC *d) {
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    memset(d, 0, sizeof *d);
    d->resType = (CUresourcetype)r->resType;
    d->flags = r->flags;
    CUresult rc = CUDA_SUCCESS;
    switch (r->resType) {
    case cudaResourceTypeArray: d->res.array.hArray = (CUarray)r->res.array.array; break;
    case cudaResourceTypeLinear:
        d->res.linear.devPtr = (CUdeviceptr)(uintptr_t)r->res.linear.devPtr;
        d->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
        rc = format_of(&r->res.linear.desc, &d->res.linear.format, &d->res.linear.numChannels);
        break;
    case cudaResourceTypePitch2D:
        d->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)r->res.pitch2D.devPtr;
        d->res.pitch2D.width = r->res.pitch2D.width, d->res.pitch2D.height = r->res.pitch2D.height;
        d->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
        rc = format_of(&r->res.pitch2D.desc, &d->res.pitch2D.format, &d->res.pitch2D.numChannels);
        break;
    default: rc = CUDA_ERROR_NOT_SUPPORTED; /* mipmapped arrays are not offered */
    }
    return rc;
}

/* CU_TRSF_* flags of a runtime texture description. */
#define TRSF_READ_AS_INTEGER 0x01
#define TRSF_NORMALIZED_COORDINATES 0x02
#define TRSF_SRGB 0x10
#define TRSF_DISABLE_TRILINEAR_OPTIMIZATION 0x20
#define TRSF_SEAMLESS_CUBEMAP 0x40

static int integer_format(const CUDA_RESOURCE_DESC *d) {
    CUarray_format f = d->resType == CU_RESOURCE_TYPE_LINEAR    ? d->res.linear.format
                       : d->resType == CU_RESOURCE_TYPE_PITCH2D ? d->res.pitch2D.format
                                                                : CU_AD_FORMAT_FLOAT;
    return f != CU_AD_FORMAT_FLOAT && f != CU_AD_FORMAT_HALF;
}

EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t *obj, const struct cudaResourceDesc *r,
                                           const struct cudaTextureDesc *t, const struct cudaResourceViewDesc *v) {
    if (!obj || !t) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUDA_RESOURCE_DESC d;
    CUresult rc = resource_to_driver(r, &d);
    if (rc != CUDA_SUCCESS) return ret(rc);
    CUDA_TEXTURE_DESC td;
    memset(&td, 0, sizeof td);
    for (int i = 0; i < 3; i++) td.addressMode[i] = (CUaddress_mode)t->addressMode[i];
    td.filterMode = (CUfilter_mode)t->filterMode, td.mipmapFilterMode = (CUfilter_mode)t->mipmapFilterMode;
    td.maxAnisotropy = t->maxAnisotropy, td.mipmapLevelBias = t->mipmapLevelBias;
    td.minMipmapLevelClamp = t->minMipmapLevelClamp, td.maxMipmapLevelClamp = t->maxMipmapLevelClamp;
    memcpy(td.borderColor, t->borderColor, sizeof td.borderColor);
    /* Element-type reads of an integer format return integers (an array's format is the driver's). */
    if (t->readMode == cudaReadModeElementType && integer_format(&d)) td.flags |= TRSF_READ_AS_INTEGER;
    if (t->normalizedCoords) td.flags |= TRSF_NORMALIZED_COORDINATES;
    if (t->sRGB) td.flags |= TRSF_SRGB;
    if (t->disableTrilinearOptimization) td.flags |= TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
    if (t->seamlessCubemap) td.flags |= TRSF_SEAMLESS_CUBEMAP;
    return ret(cuTexObjectCreate((CUtexObject *)obj, &d, &td, (const CUDA_RESOURCE_VIEW_DESC *)v));
}

EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t obj) { return ret(cuTexObjectDestroy(obj)); }

EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *r, cudaTextureObject_t obj) {
    if (!r) return ret(CUDA_ERROR_INVALID_VALUE);
    CUDA_RESOURCE_DESC d;
    CUresult rc = cuTexObjectGetResourceDesc(&d, obj);
    if (rc != CUDA_SUCCESS) return ret(rc);
    memset(r, 0, sizeof *r);
    r->resType = (enum cudaResourceType)d.resType;
    r->flags = d.flags;
    switch (d.resType) {
    case CU_RESOURCE_TYPE_ARRAY: r->res.array.array = (cudaArray_t)d.res.array.hArray; break;
    case CU_RESOURCE_TYPE_LINEAR:
        r->res.linear.devPtr = (void *)(uintptr_t)d.res.linear.devPtr, r->res.linear.sizeInBytes = d.res.linear.sizeInBytes;
        r->res.linear.desc = channels_of(d.res.linear.format, d.res.linear.numChannels);
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        r->res.pitch2D.devPtr = (void *)(uintptr_t)d.res.pitch2D.devPtr;
        r->res.pitch2D.width = d.res.pitch2D.width, r->res.pitch2D.height = d.res.pitch2D.height;
        r->res.pitch2D.pitchInBytes = d.res.pitch2D.pitchInBytes;
        r->res.pitch2D.desc = channels_of(d.res.pitch2D.format, d.res.pitch2D.numChannels);
        break;
    default: break;
    }
    return cudaSuccess;
}

EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *obj, const struct cudaResourceDesc *r) {
    if (!obj) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUDA_RESOURCE_DESC d;
    CUresult rc = resource_to_driver(r, &d);
    return ret(rc != CUDA_SUCCESS ? rc : cuSurfObjectCreate((CUsurfObject *)obj, &d));
}

EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t obj) { return ret(cuSurfObjectDestroy(obj)); }

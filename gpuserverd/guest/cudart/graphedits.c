/* The runtime's host nodes, graph clones and changes to an executable graph's nodes: layers over
 * the driver's (gpucloud's libcuda.so.1 runs host nodes in this process: guest/driver/graphstage.c). */
#include "internal.h"

#include <stdint.h>

/* cudaHostNodeParams is CUDA_HOST_NODE_PARAMS field for field. */
EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
                                        const struct cudaHostNodeParams *p) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUDA_HOST_NODE_PARAMS h = {.fn = (CUhostFn)p->fn, .userData = p->userData};
    return ret(cuGraphAddHostNode((CUgraphNode *)node, (CUgraph)graph, (const CUgraphNode *)deps, n, &h));
}

EXPORT cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    CUDA_HOST_NODE_PARAMS h;
    CUresult rc = cuGraphHostNodeGetParams((CUgraphNode)node, &h);
    if (rc == CUDA_SUCCESS) p->fn = (cudaHostFn_t)h.fn, p->userData = h.userData;
    return ret(rc);
}

EXPORT cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t graph) {
    READY();
    return ret(cuGraphClone((CUgraph *)clone, (CUgraph)graph));
}

EXPORT cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *node, cudaGraphNode_t orig, cudaGraph_t clone) {
    return ret(cuGraphNodeFindInClone((CUgraphNode *)node, (CUgraphNode)orig, (CUgraph)clone));
}

EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *p) {
    READY();
    CUDA_KERNEL_NODE_PARAMS k;
    CUresult rc = kernel_node_params(p, &k);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphExecKernelNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &k));
}

EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const struct cudaMemsetParams *p) {
    CUDA_MEMSET_NODE_PARAMS m;
    CUcontext ctx;
    CUresult rc = memset_node_params(p, &m, &ctx);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return ret(cuGraphExecMemsetNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &m, ctx));
}

EXPORT cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                  const struct cudaHostNodeParams *p) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    CUDA_HOST_NODE_PARAMS h = {.fn = (CUhostFn)p->fn, .userData = p->userData};
    return ret(cuGraphExecHostNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &h));
}

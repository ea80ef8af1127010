// CUDA 12's graph additions (graphextras.c): conditional nodes, graph memory nodes and the
// device's graph memory, capture into an existing graph. Each call makes ctx current first.
#ifndef GPUCLOUD_CUDA_GRAPHEXTRAS_H
#define GPUCLOUD_CUDA_GRAPHEXTRAS_H

#include "families.h"

CUresult gc_cond_create(CUcontext ctx, unsigned long long *h, CUgraph g, unsigned def, unsigned flags);
// bodies receives size graphs, owned by the node.
CUresult gc_add_conditional(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps,
                            unsigned long long handle, unsigned type, unsigned size, CUgraph *bodies);
CUresult gc_add_mem_alloc(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, size_t bytes,
                          unsigned alloc_type, unsigned loc_type, int loc_id, CUdeviceptr *ptr);
CUresult gc_add_mem_free(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUdeviceptr ptr);
CUresult gc_mem_alloc_node_bytes(CUcontext ctx, CUgraphNode n, size_t *bytes);
CUresult gc_child_graph(CUcontext ctx, CUgraphNode n, CUgraph *g);
CUresult gc_graph_mem_trim(CUcontext ctx, CUdevice dev);
CUresult gc_graph_mem_get(CUcontext ctx, CUdevice dev, int attr, unsigned long long *v);
CUresult gc_graph_mem_set(CUcontext ctx, CUdevice dev, int attr, unsigned long long v);
CUresult gc_capture_to_graph(CUcontext ctx, CUstream s, CUgraph g, CUgraphNode *deps, size_t ndeps, unsigned mode);
CUresult gc_capture_graph(CUcontext ctx, CUstream s, unsigned *status, unsigned long long *id, CUgraph *g,
                          const CUgraphNode **deps, size_t *ndeps);
CUresult gc_update_capture_deps(CUcontext ctx, CUstream s, CUgraphNode *deps, size_t ndeps, unsigned flags);

#endif

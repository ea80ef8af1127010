// Host nodes, clones, node removal and edges (graphedits.c): NVIDIA's calls, resolved from the
// loaded driver on first use (CUDA_ERROR_NOT_SUPPORTED where a driver lacks one). Each call makes
// ctx current first.
#ifndef GPUCLOUD_CUDA_GRAPHEDITS_H
#define GPUCLOUD_CUDA_GRAPHEDITS_H

#include "families.h"

// A host node here runs a function of this process that does nothing, with the token as its
// argument: the program's function lies in the guest and runs there (the worker keeps it by
// token, and never launches a graph with host nodes whole).
CUresult gc_add_host(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, unsigned long long token);
CUresult gc_capture_host(CUcontext ctx, CUstream s, unsigned long long token);
// token is 0 when the node is a host node not made here.
CUresult gc_host_token(CUcontext ctx, CUgraphNode n, unsigned long long *token);
// With from and to NULL, *n is the edge count.
CUresult gc_graph_edges(CUcontext ctx, CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *n);
CUresult gc_graph_clone(CUcontext ctx, CUgraph *clone, CUgraph g);
CUresult gc_find_in_clone(CUcontext ctx, CUgraphNode *n, CUgraphNode orig, CUgraph clone);
CUresult gc_destroy_node(CUcontext ctx, CUgraphNode n);

#endif

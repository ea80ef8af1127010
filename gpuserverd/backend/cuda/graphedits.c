// Host nodes, clones, node removal and edges (graphedits.h).
#include "graphedits.h"

#include "dl.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

void *gc_driver_lib(void);

#define NOT_SUPPORTED 801

// CUDA_HOST_NODE_PARAMS.
struct host_params {
	void (*fn)(void *);
	void *data;
};

#define EDIT_SYMBOLS(X)                                                                                \
	X(add_host, "cuGraphAddHostNode",                                                                  \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const struct host_params *))  \
	X(host_get, "cuGraphHostNodeGetParams", CUresult (*)(CUgraphNode, struct host_params *))           \
	X(launch_host, "cuLaunchHostFunc", CUresult (*)(CUstream, void (*)(void *), void *))               \
	X(edges, "cuGraphGetEdges_v2", CUresult (*)(CUgraph, CUgraphNode *, CUgraphNode *, void *, size_t *)) \
	X(clone, "cuGraphClone", CUresult (*)(CUgraph *, CUgraph))                                         \
	X(find, "cuGraphNodeFindInClone", CUresult (*)(CUgraphNode *, CUgraphNode, CUgraph))               \
	X(destroy_node, "cuGraphDestroyNode", CUresult (*)(CUgraphNode))

GC_DL_OPTIONAL_TABLE(x, EDIT_SYMBOLS)

#define READY(ctx, fn) GC_DL_BIND(x, ctx, fn)

// The function of every host node made here: never run (stages leave host nodes out), and
// harmless if it were.
static void placeholder(void *token) { (void)token; }

CUresult gc_add_host(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, unsigned long long token) {
	READY(ctx, add_host);
	struct host_params p = {placeholder, (void *)(uintptr_t)token};
	return x.add_host(n, g, deps, ndeps, &p);
}

CUresult gc_capture_host(CUcontext ctx, CUstream s, unsigned long long token) {
	READY(ctx, launch_host);
	return x.launch_host(s, placeholder, (void *)(uintptr_t)token);
}

CUresult gc_host_token(CUcontext ctx, CUgraphNode n, unsigned long long *token) {
	*token = 0;
	READY(ctx, host_get);
	struct host_params p;
	memset(&p, 0, sizeof p);
	CUresult r = x.host_get(n, &p);
	if (r == 0 && p.fn == placeholder) *token = (unsigned long long)(uintptr_t)p.data;
	return r;
}

CUresult gc_graph_edges(CUcontext ctx, CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *n) {
	READY(ctx, edges);
	return x.edges(g, from, to, NULL, n);
}

CUresult gc_graph_clone(CUcontext ctx, CUgraph *clone, CUgraph g) {
	READY(ctx, clone);
	return x.clone(clone, g);
}

CUresult gc_find_in_clone(CUcontext ctx, CUgraphNode *n, CUgraphNode orig, CUgraph clone) {
	READY(ctx, find);
	return x.find(n, orig, clone);
}

CUresult gc_destroy_node(CUcontext ctx, CUgraphNode n) {
	READY(ctx, destroy_node);
	return x.destroy_node(n);
}

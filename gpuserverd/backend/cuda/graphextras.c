// Conditional nodes, graph memory nodes and capture into a graph (graphextras.h): NVIDIA's calls,
// resolved from the loaded driver on first use (CUDA_ERROR_NOT_SUPPORTED where a driver lacks
// one), with cuda.h's structures as far as these calls use them (64-bit layouts).
#include "graphextras.h"

#include "dl.h"

#include <pthread.h>
#include <string.h>

void *gc_driver_lib(void);

#define NOT_SUPPORTED 801
#define NODE_TYPE_CONDITIONAL 13

// CUDA_CONDITIONAL_NODE_PARAMS.
struct cond_params {
	unsigned long long handle;
	int type;
	unsigned size;
	CUgraph *out;
	CUcontext ctx;
};
// CUgraphNodeParams: 256 bytes, the union at offset 16.
struct node_params {
	int type;
	int reserved0[3];
	union {
		long long reserved1[29];
		struct cond_params cond;
	} u;
	long long reserved2;
};
_Static_assert(sizeof(struct node_params) == 256, "CUgraphNodeParams is 256 bytes");
// CUmemPoolProps (88 bytes) and CUDA_MEM_ALLOC_NODE_PARAMS.
struct pool_props88 {
	int alloc_type, handle_types;
	int loc_type, loc_id;
	void *win32;
	size_t max_size;
	unsigned short usage;
	unsigned char reserved[54];
};
_Static_assert(sizeof(struct pool_props88) == 88, "CUmemPoolProps is 88 bytes");
struct alloc_params {
	struct pool_props88 pool;
	const void *access;
	size_t naccess;
	size_t bytes;
	CUdeviceptr dptr;
};

#define EXTRA_SYMBOLS(X)                                                                               \
	X(cond_create, "cuGraphConditionalHandleCreate",                                                   \
	  CUresult (*)(unsigned long long *, CUgraph, CUcontext, unsigned, unsigned))                       \
	X(add_node, "cuGraphAddNode_v2",                                                                   \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, const void *, size_t, struct node_params *)) \
	X(add_alloc, "cuGraphAddMemAllocNode",                                                             \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, struct alloc_params *))         \
	X(add_free, "cuGraphAddMemFreeNode", CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr)) \
	X(alloc_get, "cuGraphMemAllocNodeGetParams", CUresult (*)(CUgraphNode, struct alloc_params *))     \
	X(child_graph, "cuGraphChildGraphNodeGetGraph", CUresult (*)(CUgraphNode, CUgraph *))              \
	X(mem_trim, "cuDeviceGraphMemTrim", CUresult (*)(CUdevice))                                        \
	X(mem_get, "cuDeviceGetGraphMemAttribute", CUresult (*)(CUdevice, int, void *))                    \
	X(mem_set, "cuDeviceSetGraphMemAttribute", CUresult (*)(CUdevice, int, void *))                    \
	X(capture_to, "cuStreamBeginCaptureToGraph",                                                       \
	  CUresult (*)(CUstream, CUgraph, const CUgraphNode *, const void *, size_t, int))                  \
	X(capture_info2, "cuStreamGetCaptureInfo_v2",                                                      \
	  CUresult (*)(CUstream, int *, unsigned long long *, CUgraph *, const CUgraphNode **, size_t *))   \
	X(update_deps, "cuStreamUpdateCaptureDependencies", CUresult (*)(CUstream, CUgraphNode *, size_t, unsigned))

GC_DL_OPTIONAL_TABLE(x, EXTRA_SYMBOLS)

// READY binds ctx, or returns NOT_SUPPORTED without the driver's fn.
#define READY(ctx, fn) GC_DL_BIND(x, ctx, fn)

CUresult gc_cond_create(CUcontext ctx, unsigned long long *h, CUgraph g, unsigned def, unsigned flags) {
	READY(ctx, cond_create);
	return x.cond_create(h, g, ctx, def, flags);
}

CUresult gc_add_conditional(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps,
                            unsigned long long handle, unsigned type, unsigned size, CUgraph *bodies) {
	READY(ctx, add_node);
	struct node_params p;
	memset(&p, 0, sizeof p);
	p.type = NODE_TYPE_CONDITIONAL;
	p.u.cond.handle = handle, p.u.cond.type = (int)type, p.u.cond.size = size, p.u.cond.ctx = ctx;
	CUresult r = x.add_node(n, g, deps, NULL, ndeps, &p);
	// phGraph_out is the driver's array, valid while the node lives: copied out at once.
	if (r == 0)
		for (unsigned i = 0; i < size; i++) bodies[i] = p.u.cond.out[i];
	return r;
}

CUresult gc_add_mem_alloc(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, size_t bytes,
                          unsigned alloc_type, unsigned loc_type, int loc_id, CUdeviceptr *ptr) {
	READY(ctx, add_alloc);
	struct alloc_params p;
	memset(&p, 0, sizeof p);
	p.pool.alloc_type = (int)alloc_type, p.pool.loc_type = (int)loc_type, p.pool.loc_id = loc_id;
	p.bytes = bytes;
	CUresult r = x.add_alloc(n, g, deps, ndeps, &p);
	*ptr = p.dptr;
	return r;
}

CUresult gc_add_mem_free(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUdeviceptr ptr) {
	READY(ctx, add_free);
	return x.add_free(n, g, deps, ndeps, ptr);
}

CUresult gc_mem_alloc_node_bytes(CUcontext ctx, CUgraphNode n, size_t *bytes) {
	READY(ctx, alloc_get);
	struct alloc_params p;
	memset(&p, 0, sizeof p);
	CUresult r = x.alloc_get(n, &p);
	*bytes = p.bytes;
	return r;
}

CUresult gc_child_graph(CUcontext ctx, CUgraphNode n, CUgraph *g) {
	READY(ctx, child_graph);
	return x.child_graph(n, g);
}

CUresult gc_graph_mem_trim(CUcontext ctx, CUdevice dev) {
	READY(ctx, mem_trim);
	return x.mem_trim(dev);
}

// Every CUgraphMem_attribute is a cuuint64_t.
CUresult gc_graph_mem_get(CUcontext ctx, CUdevice dev, int attr, unsigned long long *v) {
	*v = 0;
	READY(ctx, mem_get);
	return x.mem_get(dev, attr, v);
}

CUresult gc_graph_mem_set(CUcontext ctx, CUdevice dev, int attr, unsigned long long v) {
	READY(ctx, mem_set);
	return x.mem_set(dev, attr, &v);
}

CUresult gc_capture_to_graph(CUcontext ctx, CUstream s, CUgraph g, CUgraphNode *deps, size_t ndeps, unsigned mode) {
	READY(ctx, capture_to);
	return x.capture_to(s, g, deps, NULL, ndeps, (int)mode);
}

// deps is the driver's array, valid until the next call on the stream: the caller copies it.
CUresult gc_capture_graph(CUcontext ctx, CUstream s, unsigned *status, unsigned long long *id, CUgraph *g,
                          const CUgraphNode **deps, size_t *ndeps) {
	*status = 0, *id = 0, *g = NULL, *deps = NULL, *ndeps = 0;
	READY(ctx, capture_info2);
	int st = 0;
	CUresult r = x.capture_info2(s, &st, id, g, deps, ndeps);
	*status = (unsigned)st;
	return r;
}

CUresult gc_update_capture_deps(CUcontext ctx, CUstream s, CUgraphNode *deps, size_t ndeps, unsigned flags) {
	READY(ctx, update_deps);
	return x.update_deps(s, deps, ndeps, flags);
}

/* CUDA 12's graph additions: conditional nodes (IF, IF/ELSE, WHILE, SWITCH) on handles that
 * device code sets, memory allocation and free nodes with the device's graph memory, cuGraphAddNode,
 * and capture into an existing graph with its dependency set changed. A conditional handle is the
 * driver's own value (kernels take it by value); graphs and nodes are worker ids (graph.c). */
#include "families.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPS 1024

void gc_capture_started(uint64_t stream, int to_graph); /* graph.c */

/* Encodes message m of kind lower on the heap (dependency lists make it too large for the stack)
 * into b, n bytes; b is NULL when out of memory. */
#define HEAP_ENCODE(lower, m, b, n)         \
    size_t n = gw_##lower##_size(&(m));     \
    uint8_t *b = malloc(n);                 \
    if (b) gw_##lower##_encode(&(m), b)

/* Edge data beyond the default (full completion, no ports) is not offered. */
static CUresult plain_edges(const CUgraphEdgeData *edges, size_t n) {
    static const CUgraphEdgeData zero;
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp(&edges[i], &zero, sizeof zero) != 0) {
            if (gc_trace_on()) gc_trace("graph edge data with ports or a type: not supported");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *handle, CUgraph graph, CUcontext ctx,
                                               unsigned int defaultLaunchValue, unsigned int flags) {
    (void)ctx; /* the current context's device is the worker's */
    if (!handle || !graph || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT)) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_conditional_handle_create m = {.graph = GC_ID(graph), .default_value = defaultLaunchValue,
                                                   .flags = flags};
    GC_ENCODE(graph_conditional_handle_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_GRAPH_CONDITIONAL_HANDLE_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *handle = h;
    return GC_T(rc);
}

/* A conditional node's body arrays (phGraph_out), the library's: freed when their graph is. */
static struct bodies {
    uint64_t graph;
    CUgraph *arr;
    struct bodies *next;
    unsigned size;
} *bodies;
static pthread_mutex_t bodies_mu = PTHREAD_MUTEX_INITIALIZER;

void gc_graph_forget_bodies(uint64_t graph) {
    pthread_mutex_lock(&bodies_mu);
    for (struct bodies **p = &bodies; *p;) {
        struct bodies *b = *p;
        if (b->graph == graph) {
            *p = b->next;
            free(b->arr);
            free(b);
        } else {
            p = &b->next;
        }
    }
    pthread_mutex_unlock(&bodies_mu);
}

/* gc_graph_is_body: whether g is a conditional node's body. Host copies in one are refused: the
 * bounce buffers are refreshed at the launches of the graph they were added to (graphhost.c), and
 * a body is launched only as part of its parent. */
int gc_graph_is_body(CUgraph g) {
    int found = 0;
    pthread_mutex_lock(&bodies_mu);
    for (struct bodies *b = bodies; b && !found; b = b->next)
        for (unsigned i = 0; i < b->size && !found; i++) found = b->arr[i] == g;
    pthread_mutex_unlock(&bodies_mu);
    return found;
}

struct cond_out {
    CUgraphNode node;
    CUgraph *arr;
    unsigned size;
};

static CUresult keep_bodies(void *reply, void *arg) {
    const struct gw_graph_conditional_node_reply *r = reply;
    struct cond_out *o = arg;
    if (r->bodies_len != 8 * o->size) return CUDA_ERROR_INVALID_VALUE; /* a worker answering another shape */
    for (unsigned i = 0; i < o->size; i++) {
        uint64_t id;
        memcpy(&id, r->bodies + 8 * i, 8);
        o->arr[i] = GC_PTR(CUgraph, id);
    }
    o->node = GC_PTR(CUgraphNode, r->node);
    return CUDA_SUCCESS;
}

static CUresult add_conditional(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                CUDA_CONDITIONAL_NODE_PARAMS *p) {
    if (p->size == 0 || p->size > 8192) return CUDA_ERROR_INVALID_VALUE;
    uint8_t dep[8 * MAX_DEPS];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return rc;
    struct cond_out o = {.arr = calloc(p->size, sizeof(CUgraph)), .size = p->size};
    struct bodies *keep = malloc(sizeof *keep);
    struct gw_graph_add_conditional_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                              .handle = p->handle, .cond_type = (uint32_t)p->type, .size = p->size};
    HEAP_ENCODE(graph_add_conditional_node, m, b, n);
    if (!o.arr || !keep || !b) rc = CUDA_ERROR_OUT_OF_MEMORY;
    struct gw_graph_conditional_node_reply r;
    if (rc == CUDA_SUCCESS)
        rc = gc_request_keep(GW_TYPE_GRAPH_ADD_CONDITIONAL_NODE, 0, b, n, NULL, 0, GW_TYPE_GRAPH_CONDITIONAL_NODE_REPLY,
                             &r, keep_bodies, &o);
    free(b);
    if (rc != CUDA_SUCCESS) {
        free(o.arr);
        free(keep);
        return rc;
    }
    *keep = (struct bodies){GC_ID(graph), o.arr, NULL, o.size};
    pthread_mutex_lock(&bodies_mu);
    keep->next = bodies, bodies = keep;
    pthread_mutex_unlock(&bodies_mu);
    *node = o.node;
    p->phGraph_out = o.arr;
    return CUDA_SUCCESS;
}

/* The session's devices are the worker's: the current device is its device 0 (location id 0). */
static CUresult current_location(int id, int32_t *wire_id) {
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    if (id != dev) return CUDA_ERROR_INVALID_VALUE;
    *wire_id = 0;
    return CUDA_SUCCESS;
}

/* Allocation nodes' address ranges, reserved by the driver when the node is made and device memory
 * from the node's run to its free, launch after launch: kept for the pointer queries (cuMemcpy's
 * direction, cuPointerGetAttribute ...), which the frees of api_memory.c do not touch. A range
 * the driver gives again (after a free node) is kept once. */
static struct graph_range {
    CUdeviceptr base;
    size_t size;
} *graph_ranges;
static size_t ngraph_ranges, cgraph_ranges;
static pthread_mutex_t graph_ranges_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_graph_range(CUdeviceptr base, size_t size) {
    pthread_mutex_lock(&graph_ranges_mu);
    size_t i = 0;
    while (i < ngraph_ranges && (graph_ranges[i].base != base || graph_ranges[i].size != size)) i++;
    if (i == ngraph_ranges && ngraph_ranges == cgraph_ranges) {
        size_t c = cgraph_ranges ? 2 * cgraph_ranges : 16;
        struct graph_range *r = realloc(graph_ranges, c * sizeof *r);
        if (r) graph_ranges = r, cgraph_ranges = c;
    }
    if (i == ngraph_ranges && ngraph_ranges < cgraph_ranges) graph_ranges[ngraph_ranges++] = (struct graph_range){base, size};
    pthread_mutex_unlock(&graph_ranges_mu);
}

int gc_graph_range(CUdeviceptr p, CUdeviceptr *base, size_t *size) {
    int found = 0;
    pthread_mutex_lock(&graph_ranges_mu);
    for (size_t i = 0; i < ngraph_ranges && !found; i++)
        if (p >= graph_ranges[i].base && p - graph_ranges[i].base < graph_ranges[i].size) {
            if (base) *base = graph_ranges[i].base;
            if (size) *size = graph_ranges[i].size;
            found = 1;
        }
    pthread_mutex_unlock(&graph_ranges_mu);
    return found;
}

EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    if (!node || !p || p->bytesize == 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->poolProps.handleTypes != 0)
        return GC_T(CUDA_ERROR_INVALID_VALUE);
    int32_t loc;
    CUresult rc = current_location(p->poolProps.location.id, &loc);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < p->accessDescCount; i++) {
        /* Access for the allocation's own device is what it has anyway; peers are not offered. */
        const CUmemAccessDesc *a = p->accessDescs ? &p->accessDescs[i] : NULL;
        if (!a || a->location.type != CU_MEM_LOCATION_TYPE_DEVICE || a->location.id != p->poolProps.location.id)
            rc = CUDA_ERROR_NOT_SUPPORTED;
    }
    uint8_t dep[8 * MAX_DEPS];
    if (rc == CUDA_SUCCESS) rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_mem_alloc_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                            .bytes = p->bytesize, .alloc_type = (uint32_t)p->poolProps.allocType,
                                            .location_type = (uint32_t)p->poolProps.location.type, .location_id = loc};
    HEAP_ENCODE(graph_add_mem_alloc_node, m, b, n);
    if (!b) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    struct gw_graph_mem_alloc_node_reply r;
    rc = gc_request_keep(GW_TYPE_GRAPH_ADD_MEM_ALLOC_NODE, 0, b, n, NULL, 0, GW_TYPE_GRAPH_MEM_ALLOC_NODE_REPLY, &r,
                         NULL, NULL);
    free(b);
    if (rc == CUDA_SUCCESS) {
        *node = GC_PTR(CUgraphNode, r.node), p->dptr = r.ptr;
        keep_graph_range(r.ptr, p->bytesize);
    }
    return GC_T(rc);
}

EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                      CUdeviceptr dptr) {
    if (!node || !dptr) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint8_t dep[8 * MAX_DEPS];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_mem_free_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                           .ptr = dptr};
    HEAP_ENCODE(graph_add_mem_free_node, m, b, n);
    if (!b) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    struct gw_handle_reply r;
    rc = gc_request_keep(GW_TYPE_GRAPH_ADD_MEM_FREE_NODE, 0, b, n, NULL, 0, GW_TYPE_HANDLE_REPLY, &r, NULL, NULL);
    free(b);
    if (rc == CUDA_SUCCESS) *node = GC_PTR(CUgraphNode, r.handle);
    return GC_T(rc);
}

EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                  size_t ndeps, CUgraphNodeParams *p) {
    if (!node || !p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = plain_edges(edges, ndeps);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    switch ((int)p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return cuGraphAddKernelNode_v2(node, graph, deps, ndeps, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS ms = {.dst = p->memset.dst, .pitch = p->memset.pitch, .value = p->memset.value,
                                      .elementSize = p->memset.elementSize, .width = p->memset.width,
                                      .height = p->memset.height};
        return cuGraphAddMemsetNode(node, graph, deps, ndeps, &ms, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags) return GC_T(CUDA_ERROR_INVALID_VALUE);
        return cuGraphAddMemcpyNode(node, graph, deps, ndeps, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(node, graph, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return cuGraphAddMemAllocNode(node, graph, deps, ndeps, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(node, graph, deps, ndeps, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return GC_T(add_conditional(node, graph, deps, ndeps, &p->conditional));
    case CU_GRAPH_NODE_TYPE_HOST:
        return cuGraphAddHostNode(node, graph, deps, ndeps, &p->host);
    }
    if (gc_trace_on()) gc_trace("cuGraphAddNode: node type %d is not offered", (int)p->type);
    return GC_T(CUDA_ERROR_NOT_SUPPORTED);
}

/* CUDA 12.2's form, without edge data. */
EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                               CUgraphNodeParams *p) {
    return cuGraphAddNode_v2(node, graph, deps, NULL, ndeps, p);
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
    struct gw_device_graph_mem_trim m = {.ordinal = (uint32_t)dev};
    GC_ENCODE(device_graph_mem_trim, m, b);
    return GC_T(gc_call_status(GW_TYPE_DEVICE_GRAPH_MEM_TRIM, 0, b, b_n));
}

EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value) {
    if (!value) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_device_graph_mem_attribute m = {.ordinal = (uint32_t)dev, .attribute = (uint32_t)attr};
    GC_ENCODE(device_graph_mem_attribute, m, b);
    struct gw_size_reply r;
    CUresult rc = gc_request(GW_TYPE_DEVICE_GRAPH_MEM_ATTRIBUTE, 0, b, b_n, GW_TYPE_SIZE_REPLY, &r);
    if (rc == CUDA_SUCCESS) *(cuuint64_t *)value = r.value;
    return GC_T(rc);
}

EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value) {
    if (!value) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_device_set_graph_mem_attribute m = {.ordinal = (uint32_t)dev, .attribute = (uint32_t)attr,
                                                  .value = *(const cuuint64_t *)value};
    GC_ENCODE(device_set_graph_mem_attribute, m, b);
    return GC_T(gc_call_status(GW_TYPE_DEVICE_SET_GRAPH_MEM_ATTRIBUTE, 0, b, b_n));
}

EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode *deps,
                                            const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode) {
    if (!graph || (unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = plain_edges(edges, ndeps);
    uint8_t dep[8 * MAX_DEPS];
    if (rc == CUDA_SUCCESS) rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    /* Relaxed in the worker, as cuStreamBeginCapture's (graph.c says why). */
    struct gw_stream_begin_capture_to_graph m = {.stream = gc_stream_handle(s), .graph = GC_ID(graph), .deps = dep,
                                                 .deps_len = (uint32_t)(8 * ndeps), .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    HEAP_ENCODE(stream_begin_capture_to_graph, m, b, n);
    if (!b) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    rc = gc_call_status(GW_TYPE_STREAM_BEGIN_CAPTURE_TO_GRAPH, 0, b, n);
    free(b);
    if (rc == CUDA_SUCCESS) gc_capture_started(m.stream, 1);
    return GC_T(rc);
}

EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
                                                     size_t ndeps, unsigned int flags) {
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = plain_edges(edges, ndeps);
    uint8_t dep[8 * MAX_DEPS];
    if (rc == CUDA_SUCCESS) rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_stream_update_capture_dependencies m = {.stream = gc_stream_handle(s), .deps = dep,
                                                      .deps_len = (uint32_t)(8 * ndeps), .flags = flags};
    HEAP_ENCODE(stream_update_capture_dependencies, m, b, n);
    if (!b) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    rc = gc_call_status(GW_TYPE_STREAM_UPDATE_CAPTURE_DEPENDENCIES, 0, b, n);
    free(b);
    return GC_T(rc);
}

/* CUDA 12.2's form, without edge data. */
EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, size_t ndeps, unsigned int flags) {
    return cuStreamUpdateCaptureDependencies_v2(s, deps, NULL, ndeps, flags);
}

/* The capture's graph and dependencies (cuStreamGetCaptureInfo_v2/_v3): the dependency array is
 * the calling thread's, valid until its next such call. */
static __thread CUgraphNode *cap_deps;
static __thread size_t cap_deps_cap;

struct capture_out {
    CUstreamCaptureStatus status;
    cuuint64_t id;
    CUgraph graph;
    size_t ndeps;
};

static CUresult keep_capture(void *reply, void *arg) {
    const struct gw_capture_graph_reply *r = reply;
    struct capture_out *o = arg;
    size_t n = r->deps_len / 8;
    if (n > cap_deps_cap) {
        CUgraphNode *p = realloc(cap_deps, n * sizeof *p);
        if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
        cap_deps = p, cap_deps_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        memcpy(&id, r->deps + 8 * i, 8);
        cap_deps[i] = GC_PTR(CUgraphNode, id);
    }
    *o = (struct capture_out){(CUstreamCaptureStatus)r->status, r->id, GC_PTR(CUgraph, r->graph), n};
    return CUDA_SUCCESS;
}

CUresult gc_capture_graph(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                          const CUgraphNode **deps, size_t *ndeps) {
    struct gw_stream_capture_graph m = {.stream = gc_stream_handle(s)};
    GC_ENCODE(stream_capture_graph, m, b);
    struct gw_capture_graph_reply r;
    struct capture_out o = {0};
    CUresult rc = gc_request_keep(GW_TYPE_STREAM_CAPTURE_GRAPH, 0, b, b_n, NULL, 0, GW_TYPE_CAPTURE_GRAPH_REPLY, &r,
                                  keep_capture, &o);
    if (rc != CUDA_SUCCESS) return rc;
    *status = o.status;
    if (id) *id = o.id;
    if (graph) *graph = o.graph;
    if (deps) *deps = o.ndeps ? cap_deps : NULL;
    if (ndeps) *ndeps = o.ndeps;
    return CUDA_SUCCESS;
}

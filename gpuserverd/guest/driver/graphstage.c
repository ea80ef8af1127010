/* Host nodes, clones, and changes to an executable graph's nodes.
 *
 * A host node's function lies in this process, so it runs here. The worker keeps host nodes as
 * the program's function and argument, and instantiates a graph with host nodes by stages: the
 * GPU nodes between host nodes (gpuserverd/worker/graphstage.go). cuGraphLaunch of such a graph
 * launches stage k, waits for it on the launch stream, runs the host nodes of stage k in this
 * thread, then launches stage k+1; the copies with the program's pageable memory (graphhost.c)
 * move with their own stage. As cudaLaunchHostFunc here (the guest cannot make a stream wait
 * for the host across the wire), the launch returns after the last host node ran: correct, not
 * asynchronous. A host node that waits for work the same thread enqueues only after the launch
 * would deadlock, as NVIDIA documents host functions must not make CUDA calls anyway. */
#include "families.h"
#include "graphhost.h"
#include "graphstage.h"

#include <stdlib.h>
#include <string.h>

int gc_graph_is_body(CUgraph g); /* graphextras.c */

/* Whether a host node was ever made here: only then do instantiations ask for their plan. */
static int any_hosts;

struct host_call {
    uint64_t node;
    uint64_t stage;
    uint64_t fn, data;
};

/* How an executable graph with host nodes is launched. */
struct plan {
    uint64_t exec;
    unsigned stages;
    uint64_t *nodes; /* of its graph, with their stages */
    uint32_t *node_stages;
    size_t nnodes;
    struct host_call *hosts;
    size_t nhosts;
};

static struct plan *plans;
static size_t nplans, cplans;
static pthread_mutex_t plans_mu = PTHREAD_MUTEX_INITIALIZER;

static struct plan *plan_locked(uint64_t exec) {
    for (size_t i = 0; i < nplans; i++)
        if (plans[i].exec == exec) return &plans[i];
    return NULL;
}

static void plan_free(struct plan *p) {
    free(p->nodes);
    free(p->node_stages);
    free(p->hosts);
}

void gc_stage_forget(CUgraphExec x) {
    if (!__atomic_load_n(&nplans, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&plans_mu);
    struct plan *p = plan_locked(GC_ID(x));
    if (p) {
        plan_free(p);
        *p = plans[--nplans];
    }
    pthread_mutex_unlock(&plans_mu);
}

/* Copies the plan out of the reply (whose buffer the next call reuses). gc.mu held. */
static CUresult keep_plan(void *reply, void *arg) {
    const struct gw_graph_plan_reply *r = reply;
    struct plan *p = arg;
    p->stages = r->stages;
    if (!r->stages) return CUDA_SUCCESS;
    p->nnodes = r->nodes_len / 8, p->nhosts = r->hosts_len / 32;
    if (r->node_stages_count != p->nnodes || r->nodes_len % 8 || r->hosts_len % 32) return CUDA_ERROR_UNKNOWN;
    p->nodes = malloc(p->nnodes * 8 + 1);
    p->node_stages = malloc(p->nnodes * 4 + 1);
    p->hosts = malloc(p->nhosts * sizeof *p->hosts + 1);
    if (!p->nodes || !p->node_stages || !p->hosts) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(p->nodes, r->nodes, p->nnodes * 8);
    memcpy(p->node_stages, r->node_stages, p->nnodes * 4);
    memcpy(p->hosts, r->hosts, p->nhosts * 32); /* node, stage, fn, data: little-endian u64s */
    return CUDA_SUCCESS;
}

CUresult gc_stage_instantiated(CUgraphExec x) {
    if (!__atomic_load_n(&any_hosts, __ATOMIC_RELAXED)) return CUDA_SUCCESS;
    struct gw_graph_exec_plan m = {.exec = GC_ID(x)};
    GC_ENCODE(graph_exec_plan, m, b);
    struct gw_graph_plan_reply r;
    struct plan p = {.exec = m.exec};
    CUresult rc = gc_request_keep(GW_TYPE_GRAPH_EXEC_PLAN, 0, b, b_n, NULL, 0, GW_TYPE_GRAPH_PLAN_REPLY, &r, keep_plan, &p);
    if (rc != CUDA_SUCCESS || !p.stages) {
        plan_free(&p);
        return rc;
    }
    pthread_mutex_lock(&plans_mu);
    if (nplans == cplans) {
        size_t c = cplans ? 2 * cplans : 8;
        struct plan *np = realloc(plans, c * sizeof *np);
        if (np) plans = np, cplans = c;
    }
    if (nplans < cplans) plans[nplans++] = p;
    else rc = CUDA_ERROR_OUT_OF_MEMORY, plan_free(&p);
    pthread_mutex_unlock(&plans_mu);
    return rc;
}

CUresult gc_stage_updated(CUgraphExec x) {
    gc_stage_forget(x);
    return gc_stage_instantiated(x);
}

unsigned gc_stage_count(CUgraphExec x) {
    if (!__atomic_load_n(&nplans, __ATOMIC_RELAXED)) return 0;
    pthread_mutex_lock(&plans_mu);
    struct plan *p = plan_locked(GC_ID(x));
    unsigned n = p ? p->stages : 0;
    pthread_mutex_unlock(&plans_mu);
    return n;
}

int gc_stage_of(CUgraphExec x, uint64_t node) {
    if (!__atomic_load_n(&nplans, __ATOMIC_RELAXED)) return -1;
    pthread_mutex_lock(&plans_mu);
    struct plan *p = plan_locked(GC_ID(x));
    int at = -1;
    for (size_t i = 0; p && i < p->nnodes && at < 0; i++)
        if (p->nodes[i] == node) at = (int)p->node_stages[i];
    pthread_mutex_unlock(&plans_mu);
    return at;
}

/* x's host calls (a copy: a concurrent cuGraphExecHostNodeSetParams or destroy may change the
 * plan meanwhile), *n of them, and its stage count. */
static struct host_call *host_calls(CUgraphExec x, size_t *n, unsigned *stages) {
    pthread_mutex_lock(&plans_mu);
    struct plan *p = plan_locked(GC_ID(x));
    struct host_call *out = p ? malloc(p->nhosts * sizeof *out + 1) : NULL;
    *n = 0, *stages = 0;
    if (out) {
        memcpy(out, p->hosts, p->nhosts * sizeof *out);
        *n = p->nhosts, *stages = p->stages;
    }
    pthread_mutex_unlock(&plans_mu);
    return out;
}

CUresult gc_stage_launch(CUgraphExec x, CUstream s) {
    if (gc_is_capturing(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the host nodes would run now */
    size_t n;
    unsigned stages;
    struct host_call *hosts = host_calls(x, &n, &stages);
    if (!hosts) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    int last = (int)stages - 1;
    for (unsigned k = 0; k < stages && rc == CUDA_SUCCESS; k++) {
        rc = gc_graphhost_move_stage(x, s, 1, (int)k, last);
        struct gw_graph_launch_stage m = {.exec = GC_ID(x), .stream = gc_stream_handle(s), .stage = k};
        uint8_t b[64];
        size_t b_n = gw_graph_launch_stage_size(&m);
        gw_graph_launch_stage_encode(&m, b);
        if (rc == CUDA_SUCCESS) rc = gc_call_status(GW_TYPE_GRAPH_LAUNCH_STAGE, GW_FLAG_NO_REPLY, b, b_n);
        if (rc == CUDA_SUCCESS) rc = gc_graphhost_move_stage(x, s, 0, (int)k, last);
        int any = 0;
        for (size_t i = 0; i < n; i++) any |= hosts[i].stage == k;
        if (!any || rc != CUDA_SUCCESS) continue;
        rc = cuStreamSynchronize(s); /* as NVIDIA's: a host node does not run after an error */
        for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++)
            if (hosts[i].stage == k) ((CUhostFn)(uintptr_t)hosts[i].fn)((void *)(uintptr_t)hosts[i].data);
    }
    free(hosts);
    return rc;
}

/* ---- host nodes ---- */

EXPORT CUresult cuGraphAddHostNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                   const CUDA_HOST_NODE_PARAMS *p) {
    if (!node || !p || !p->fn) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (gc_graph_is_body(graph)) { /* a body is never launched by stages */
        if (gc_trace_on()) gc_trace("cuGraphAddHostNode: host nodes in a conditional node's body are refused");
        return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    }
    uint8_t dep[8 * 1024];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_host_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                       .fn = (uint64_t)(uintptr_t)p->fn, .data = (uint64_t)(uintptr_t)p->userData};
    size_t n = gw_graph_add_host_node_size(&m);
    uint8_t *b = malloc(n);
    if (!b) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    gw_graph_add_host_node_encode(&m, b);
    uint64_t h = 0;
    __atomic_store_n(&any_hosts, 1, __ATOMIC_RELAXED);
    rc = gc_handle_call(GW_TYPE_GRAPH_ADD_HOST_NODE, b, n, &h);
    free(b);
    if (rc == CUDA_SUCCESS) *node = GC_PTR(CUgraphNode, h);
    return GC_T(rc);
}

EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *p) {
    if (!p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_host_node_get_params m = {.node = GC_ID(node)};
    GC_ENCODE(graph_host_node_get_params, m, b);
    struct gw_graph_host_node_reply r;
    CUresult rc = gc_request(GW_TYPE_GRAPH_HOST_NODE_GET_PARAMS, 0, b, b_n, GW_TYPE_GRAPH_HOST_NODE_REPLY, &r);
    if (rc == CUDA_SUCCESS) p->fn = (CUhostFn)(uintptr_t)r.fn, p->userData = (void *)(uintptr_t)r.data;
    return GC_T(rc);
}

/* Whether s captures (the stream a capture began on, or one that joined it). */
static int capturing(CUstream s) {
    uint64_t id;
    return gc_any_capturing() && (gc_is_capturing(s) || gc_graphhost_capturing(s, &id));
}

/* On a capturing stream, a host node of the capture; else the function runs here once the
 * stream's earlier work has ended (see the top of this file). */
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    if (!fn) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (capturing(s)) {
        struct gw_capture_host_func m = {.stream = gc_stream_handle(s), .fn = (uint64_t)(uintptr_t)fn,
                                         .data = (uint64_t)(uintptr_t)data};
        GC_ENCODE(capture_host_func, m, b);
        __atomic_store_n(&any_hosts, 1, __ATOMIC_RELAXED);
        CUresult rc = gc_call_status(GW_TYPE_CAPTURE_HOST_FUNC, 0, b, b_n);
        if (rc != CUDA_SUCCESS) gc_capture_refuses(s);
        return GC_T(rc);
    }
    CUresult rc = cuStreamSynchronize(s);
    if (rc != CUDA_SUCCESS) return GC_T(rc); /* as NVIDIA's: not called after an error */
    fn(data);
    return GC_T(CUDA_SUCCESS);
}

/* A callback is called with the stream's error; it cannot be captured (NVIDIA's refuses too). */
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags) {
    if (!cb || flags != 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (capturing(s)) {
        gc_capture_refuses(s);
        return GC_T(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    cb(s, cuStreamSynchronize(s), data);
    return GC_T(CUDA_SUCCESS);
}

/* ---- clones ---- */

struct clone_out {
    uint64_t graph;
    uint64_t *pairs;
    size_t npairs;
};

static CUresult keep_clone(void *reply, void *arg) {
    const struct gw_graph_clone_reply *r = reply;
    struct clone_out *o = arg;
    o->graph = r->graph;
    o->npairs = r->nodes_len / 16;
    o->pairs = malloc(o->npairs * 16 + 1);
    if (!o->pairs) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(o->pairs, r->nodes, o->npairs * 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph graph) {
    if (!clone) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_clone m = {.graph = GC_ID(graph)};
    GC_ENCODE(graph_clone, m, b);
    struct gw_graph_clone_reply r;
    struct clone_out o = {0};
    CUresult rc = gc_request_keep(GW_TYPE_GRAPH_CLONE, 0, b, b_n, NULL, 0, GW_TYPE_GRAPH_CLONE_REPLY, &r, keep_clone, &o);
    if (rc == CUDA_SUCCESS) {
        *clone = GC_PTR(CUgraph, o.graph);
        gc_graphhost_cloned(graph, *clone, o.pairs, o.npairs); /* the clone's copies are the graph's */
    } else if (o.graph) {
        cuGraphDestroy(GC_PTR(CUgraph, o.graph));
    }
    free(o.pairs);
    return GC_T(rc);
}

EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *node, CUgraphNode orig, CUgraph clone) {
    if (!node) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_node_find_in_clone m = {.node = GC_ID(orig), .clone = GC_ID(clone)};
    GC_ENCODE(graph_node_find_in_clone, m, b);
    uint64_t h = 0;
    CUresult rc = gc_handle_call(GW_TYPE_GRAPH_NODE_FIND_IN_CLONE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *node = GC_PTR(CUgraphNode, h);
    return GC_T(rc);
}

/* ---- an executable graph's nodes ---- */

/* Reads only the fields of CUDA 11's CUDA_KERNEL_NODE_PARAMS, as cuGraphAddKernelNode. The
 * arguments are packed now, as a launch's: the node takes the values they have at this call. */
EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
    if (!p || !p->func) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint8_t *packed = malloc(32768);
    if (!packed) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    const void *pbuf = packed;
    size_t plen = 0;
    pthread_mutex_lock(&gc.mu);
    CUresult rc = gc_pack_params_locked(p->func, p->kernelParams, p->extra, packed, &pbuf, &plen);
    pthread_mutex_unlock(&gc.mu);
    struct gw_graph_exec_kernel_node_set_params m = {
        .exec = GC_ID(exec), .node = GC_ID(node), .function = p->func->handle, .grid_x = p->gridDimX,
        .grid_y = p->gridDimY, .grid_z = p->gridDimZ, .block_x = p->blockDimX, .block_y = p->blockDimY,
        .block_z = p->blockDimZ, .shared_mem = p->sharedMemBytes, .params = pbuf, .params_len = (uint32_t)plen};
    uint8_t *b = NULL;
    size_t n = 0;
    if (rc == CUDA_SUCCESS) {
        n = gw_graph_exec_kernel_node_set_params_size(&m);
        b = malloc(n);
        rc = b ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        gw_graph_exec_kernel_node_set_params_encode(&m, b);
        rc = gc_call_status(GW_TYPE_GRAPH_EXEC_KERNEL_NODE_SET_PARAMS, 0, b, n);
    }
    free(b);
    free(packed);
    return GC_T(rc);
}
ALIAS(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2);

EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p,
                                               CUcontext ctx) {
    (void)ctx; /* the current context's device is the worker's */
    if (!p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_exec_memset_node_set_params m = {.exec = GC_ID(exec), .node = GC_ID(node), .dst = p->dst,
                                                     .pitch = p->pitch, .value = p->value, .elem_size = p->elementSize,
                                                     .width = p->width, .height = p->height};
    GC_ENCODE(graph_exec_memset_node_set_params, m, b);
    return GC_T(gc_call_status(GW_TYPE_GRAPH_EXEC_MEMSET_NODE_SET_PARAMS, 0, b, b_n));
}

/* Device, array and shared-arena sides; the program's pageable memory is refused here (its bounce
 * buffer belongs to the node as the graph made it). */
EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *c,
                                               CUcontext ctx) {
    (void)ctx;
    if (!c) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gc_side src, dst;
    CUresult rc = gc_copy3d_sides(c, &src, &dst);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    gc_graph_arena_side(&src, c->WidthInBytes, c->Height, c->Depth);
    gc_graph_arena_side(&dst, c->WidthInBytes, c->Height, c->Depth);
    if (src.kind == 1 || dst.kind == 1) {
        if (gc_trace_on()) gc_trace("cuGraphExecMemcpyNodeSetParams: pageable host memory refused");
        return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    }
    struct gw_graph_exec_memcpy_node_set_params m = {
        .exec = GC_ID(exec), .node = GC_ID(node), .src_kind = src.kind, .src = src.ptr, .src_pitch = src.pitch,
        .src_height = src.height, .src_x = src.x, .src_y = src.y, .src_z = src.z, .dst_kind = dst.kind, .dst = dst.ptr,
        .dst_pitch = dst.pitch, .dst_height = dst.height, .dst_x = dst.x, .dst_y = dst.y, .dst_z = dst.z,
        .width = c->WidthInBytes, .height = c->Height, .depth = c->Depth};
    GC_ENCODE(graph_exec_memcpy_node_set_params, m, b);
    return GC_T(gc_call_status(GW_TYPE_GRAPH_EXEC_MEMCPY_NODE_SET_PARAMS, 0, b, b_n));
}

EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p) {
    if (!p || !p->fn) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_exec_host_node_set_params m = {.exec = GC_ID(exec), .node = GC_ID(node),
                                                   .fn = (uint64_t)(uintptr_t)p->fn,
                                                   .data = (uint64_t)(uintptr_t)p->userData};
    GC_ENCODE(graph_exec_host_node_set_params, m, b);
    CUresult rc = gc_call_status(GW_TYPE_GRAPH_EXEC_HOST_NODE_SET_PARAMS, 0, b, b_n);
    if (rc == CUDA_SUCCESS) rc = gc_stage_updated(exec); /* the worker names the node as it knows it */
    return GC_T(rc);
}

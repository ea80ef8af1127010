/* CUDA graphs and stream capture. Capture happens in the worker: calls on a capturing stream are
 * forwarded as usual and its stream there captures them. Graphs, nodes and executable graphs are
 * worker ids. Host nodes, clones and changes to executable graphs: graphstage.c. */
#include "families.h"
#include "graphhost.h"
#include "graphstage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The streams capturing now, and whether this library refused a call on one (which invalidates
 * the capture): the worker's stream never saw that call. */
/* graphextras.c */
void gc_graph_forget_bodies(uint64_t graph);
int gc_graph_is_body(CUgraph g);
CUresult gc_capture_graph(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                          const CUgraphNode **deps, size_t *ndeps);

#define MAX_CAPTURES 64
static struct {
    uint64_t stream;
    int invalid;
    int to_graph; /* into an existing graph (cuStreamBeginCaptureToGraph): the graph out is optional */
} captures[MAX_CAPTURES];
static int ncaptures;
static int captures_overflow; /* a capture went unrecorded: only the worker can tell who captures */
static pthread_mutex_t captures_mu = PTHREAD_MUTEX_INITIALIZER;

/* The slot of stream h, or -1. captures_mu held. */
static int capture_slot(uint64_t h) {
    for (int i = 0; i < ncaptures; i++)
        if (captures[i].stream == h) return i;
    return -1;
}

int gc_is_capturing(CUstream s) {
    if (ncaptures == 0) return 0;
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(gc_stream_handle(s));
    pthread_mutex_unlock(&captures_mu);
    return i >= 0;
}

int gc_capture_refuses(CUstream s) {
    if (ncaptures == 0) return 0; /* read without the lock: a stale 0 only skips a refusal the worker makes */
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(gc_stream_handle(s));
    if (i >= 0) captures[i].invalid = 1;
    pthread_mutex_unlock(&captures_mu);
    return i >= 0;
}

/* Ends the local record of a capture; returns whether it was invalidated here. */
static int capture_done(uint64_t h) {
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(h), invalid = 0;
    if (i >= 0) {
        invalid = captures[i].invalid;
        captures[i] = captures[--ncaptures];
    }
    pthread_mutex_unlock(&captures_mu);
    return invalid;
}

/* Records a capture the worker began on stream h. */
void gc_capture_started(uint64_t h, int to_graph) {
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(h);
    if (i < 0 && ncaptures < MAX_CAPTURES) captures[ncaptures++] = (typeof(captures[0])){h, 0, to_graph};
    else if (i < 0) captures_overflow = 1;
    pthread_mutex_unlock(&captures_mu);
}

/* Whether stream h captures into an existing graph. */
static int capture_to_graph(uint64_t h) {
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(h), to = i >= 0 && captures[i].to_graph;
    pthread_mutex_unlock(&captures_mu);
    return to;
}

/* A capture's mode says which potentially unsafe calls (cuMemAlloc, synchronous copies ...) the
 * driver refuses meanwhile, by the calling thread's own mode (cuThreadExchangeStreamCaptureMode).
 * The worker serves all this process's threads on its own, which know nothing of those modes: a
 * global capture there refused PyTorch's cudaMalloc made under a relaxed guard during
 * torch.cuda.graph. So the worker's capture is relaxed; the mode is validated here, but the unsafe
 * calls a global or thread-local capture would refuse are not (a correct program makes none). */
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint64_t h = gc_stream_handle(s);
    struct gw_stream_begin_capture m = {.stream = h, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    GC_ENCODE(stream_begin_capture, m, b);
    CUresult rc = gc_call_status(GW_TYPE_STREAM_BEGIN_CAPTURE, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_capture_started(h, 0);
    return GC_T(rc);
}

/* CUDA 10.0's form, without a mode. */
EXPORT CUresult cuStreamBeginCapture(CUstream s) { return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL); }

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) {
    struct gw_stream_end_capture m = {.stream = gc_stream_handle(s)};
    if (!graph && !capture_to_graph(m.stream)) return GC_T(CUDA_ERROR_INVALID_VALUE);
    GC_ENCODE(stream_end_capture, m, b);
    uint64_t h = 0, host_copies = gc_graphhost_capture_id(s); /* captured host copies: graphhost.c */
    CUresult rc = gc_handle_call(GW_TYPE_STREAM_END_CAPTURE, b, b_n, &h);
    int to_graph = capture_to_graph(m.stream);
    int refused = capture_done(m.stream); /* a call was refused here: the capture is void */
    if (to_graph && host_copies && rc == CUDA_SUCCESS && gc_graph_is_body(GC_PTR(CUgraph, h)))
        refused = 1; /* host copies captured into a conditional body: never refreshed (see cuGraphAddMemcpyNode) */
    if (gc_graphhost_capture_end(host_copies, rc == CUDA_SUCCESS && !refused ? GC_PTR(CUgraph, h) : NULL))
        refused = 1;
    if (refused) {
        if (rc == CUDA_SUCCESS && !to_graph) cuGraphDestroy(GC_PTR(CUgraph, h));
        h = 0, rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (graph) *graph = GC_PTR(CUgraph, h);
    return GC_T(rc);
}

/* No capture begun here and not ended: no stream of this process captures (a stream joins a
 * capture only through one begun on another), answered without a round trip, since PyTorch asks
 * around every allocation and several operations. */
static int none_capturing(void) {
    pthread_mutex_lock(&captures_mu);
    int none = ncaptures == 0 && !captures_overflow;
    pthread_mutex_unlock(&captures_mu);
    return none;
}

int gc_any_capturing(void) { return !none_capturing(); }

static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id) {
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    if (none_capturing()) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (id) *id = 0;
        return CUDA_SUCCESS;
    }
    struct gw_stream_get_capture_info m = {.stream = gc_stream_handle(s)};
    GC_ENCODE(stream_get_capture_info, m, b);
    struct gw_capture_info_reply r;
    CUresult rc = gc_request(GW_TYPE_STREAM_GET_CAPTURE_INFO, 0, b, b_n, GW_TYPE_CAPTURE_INFO_REPLY, &r);
    if (rc == CUDA_SUCCESS) {
        *status = (CUstreamCaptureStatus)r.status;
        if (id) *id = r.id;
        pthread_mutex_lock(&captures_mu);
        int i = capture_slot(m.stream);
        if (i >= 0 && captures[i].invalid) *status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        pthread_mutex_unlock(&captures_mu);
    }
    return rc;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) { return GC_T(capture_info(s, status, NULL)); }

EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id) {
    return GC_T(capture_info(s, status, id));
}

/* With the graph being captured into and the capture's dependencies (graphextras.c), asked of the
 * worker only when wanted and a capture may be under way. */
EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, size_t *ndeps) {
    if (graph) *graph = NULL;
    if (deps) *deps = NULL;
    if (ndeps) *ndeps = 0;
    if (!status || (!graph && !deps && !ndeps) || none_capturing()) return GC_T(capture_info(s, status, id));
    CUresult rc = gc_capture_graph(s, status, id, graph, deps, ndeps);
    pthread_mutex_lock(&captures_mu);
    int i = capture_slot(gc_stream_handle(s));
    if (rc == CUDA_SUCCESS && i >= 0 && captures[i].invalid) *status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    pthread_mutex_unlock(&captures_mu);
    return GC_T(rc);
}

EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps) {
    if (edges) *edges = NULL;
    return cuStreamGetCaptureInfo_v2(s, status, id, graph, deps, ndeps);
}

/* Capture modes only say which calls are refused during a capture; the worker's stream decides. */
static __thread CUstreamCaptureMode thread_mode;
EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned flags) {
    if (!graph) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_create m = {.flags = flags};
    GC_ENCODE(graph_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_GRAPH_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *graph = GC_PTR(CUgraph, h);
    return GC_T(rc);
}

EXPORT CUresult cuGraphDestroy(CUgraph graph) {
    struct gw_graph_destroy m = {.graph = GC_ID(graph)};
    GC_ENCODE(graph_destroy, m, b);
    CUresult rc = gc_call_status(GW_TYPE_GRAPH_DESTROY, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_graph_forget_bodies(m.graph);
    if (rc == CUDA_SUCCESS) gc_graphhost_graph_destroyed(graph);
    return GC_T(rc);
}

/* A node-adding call: sends the encoded message (b, n bytes), stores the node. */
static CUresult add_node(uint16_t type, const uint8_t *b, size_t n, CUgraphNode *node) {
    if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
    struct gw_handle_reply r;
    CUresult rc = gc_request_keep(type, 0, b, n, NULL, 0, GW_TYPE_HANDLE_REPLY, &r, NULL, NULL);
    if (rc == CUDA_SUCCESS) *node = GC_PTR(CUgraphNode, r.handle);
    return rc;
}

/* Encodes message m of kind lower (too large for the stack: dependencies and parameters) and adds
 * the node it describes. */
#define ADD_NODE(lower, TYPE, m, node)                         \
    ({                                                         \
        size_t n_ = gw_##lower##_size(&(m));                   \
        uint8_t *b_ = malloc(n_);                              \
        if (b_) gw_##lower##_encode(&(m), b_);                 \
        CUresult rc_ = add_node(GW_TYPE_##TYPE, b_, n_, node); \
        free(b_);                                              \
        rc_;                                                   \
    })

#define MAX_DEPS 1024

/* Reads only the fields of CUDA 11's CUDA_KERNEL_NODE_PARAMS, which the current one begins with. */
EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                        const CUDA_KERNEL_NODE_PARAMS *p) {
    if (!node || !p || !p->func) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint8_t dep[8 * MAX_DEPS];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    if ((rc = gc_promote_params(p->func, p->kernelParams, p->extra)) != CUDA_SUCCESS) return GC_T(rc);
    uint8_t packed[32768];
    const void *pbuf = packed;
    size_t plen = 0;
    pthread_mutex_lock(&gc.mu);
    rc = gc_pack_params_locked(p->func, p->kernelParams, p->extra, packed, &pbuf, &plen);
    pthread_mutex_unlock(&gc.mu);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_kernel_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                         .function = p->func->handle, .grid_x = p->gridDimX, .grid_y = p->gridDimY,
                                         .grid_z = p->gridDimZ, .block_x = p->blockDimX, .block_y = p->blockDimY,
                                         .block_z = p->blockDimZ, .shared_mem = p->sharedMemBytes,
                                         .params = pbuf, .params_len = (uint32_t)plen};
    rc = ADD_NODE(graph_add_kernel_node, GRAPH_ADD_KERNEL_NODE, m, node);
    return GC_T(rc);
}
ALIAS(cuGraphAddKernelNode, cuGraphAddKernelNode_v2);

EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
    (void)ctx; /* the current context's device is the worker's */
    if (!node || !p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint8_t dep[8 * MAX_DEPS];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_memset_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                         .dst = p->dst, .pitch = p->pitch, .value = p->value,
                                         .elem_size = p->elementSize, .width = p->width, .height = p->height};
    rc = ADD_NODE(graph_add_memset_node, GRAPH_ADD_MEMSET_NODE, m, node);
    return GC_T(rc);
}

/* gc_graph_arena_side makes a host side in the shared arena a device side (the arena's device address):
 * the device reaches it when the graph replays, so the program's pinned memory may be a graph's
 * source or destination over shared memory. The whole w x h x d box must lie in the arena. */
void gc_graph_arena_side(struct gc_side *s, size_t w, size_t h, size_t d) {
    if (s->kind != 1) return;
    size_t pitch = s->pitch ? s->pitch : w, rows = s->height ? s->height : h;
    size_t first = (s->z * rows + s->y) * pitch + s->x;
    size_t last = ((s->z + (d ? d : 1) - 1) * rows + s->y + (h ? h : 1) - 1) * pitch + s->x + w;
    uint64_t a;
    if (last > first && gc_arena_device_addr(s->host, last, &a)) s->kind = 2, s->ptr = a;
}

EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMCPY3D *c, CUcontext ctx) {
    (void)ctx;
    if (!node || !c) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gc_side src, dst;
    CUresult rc = gc_copy3d_sides(c, &src, &dst);
    if (rc == CUDA_SUCCESS) {
        gc_graph_arena_side(&src, c->WidthInBytes, c->Height, c->Depth);
        gc_graph_arena_side(&dst, c->WidthInBytes, c->Height, c->Depth);
    }
    uint8_t dep[8 * MAX_DEPS];
    if (rc == CUDA_SUCCESS) rc = gc_deps(deps, ndeps, dep, sizeof dep);
    /* Other host memory is in this VM, the graph runs on the server: a bounce buffer (graphhost.c). */
    struct gc_hostcopy *hc = NULL;
    if (rc == CUDA_SUCCESS) rc = gc_graphhost_node_prepare(&src, &dst, c->WidthInBytes, c->Height, c->Depth, &hc);
    if (rc == CUDA_SUCCESS && hc && gc_graph_is_body(graph)) { /* its bounce buffers would never be refreshed */
        gc_graphhost_node_done(graph, NULL, hc, CUDA_ERROR_NOT_SUPPORTED);
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpucloud: cuGraphAddMemcpyNode: copies to or from pageable host memory in a conditional "
                            "node's body are not supported (CUDA_ERROR_NOT_SUPPORTED); device copies are\n");
        rc = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_memcpy_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps),
                                         .src_kind = src.kind, .src = src.ptr, .src_pitch = src.pitch,
                                         .src_height = src.height, .src_x = src.x, .src_y = src.y, .src_z = src.z,
                                         .dst_kind = dst.kind, .dst = dst.ptr, .dst_pitch = dst.pitch,
                                         .dst_height = dst.height, .dst_x = dst.x, .dst_y = dst.y, .dst_z = dst.z,
                                         .width = c->WidthInBytes, .height = c->Height, .depth = c->Depth};
    rc = ADD_NODE(graph_add_memcpy_node, GRAPH_ADD_MEMCPY_NODE, m, node);
    gc_graphhost_node_done(graph, rc == CUDA_SUCCESS ? *node : NULL, hc, rc);
    return GC_T(rc);
}

EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps) {
    if (!node) return GC_T(CUDA_ERROR_INVALID_VALUE);
    uint8_t dep[8 * MAX_DEPS];
    CUresult rc = gc_deps(deps, ndeps, dep, sizeof dep);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct gw_graph_add_empty_node m = {.graph = GC_ID(graph), .deps = dep, .deps_len = (uint32_t)(8 * ndeps)};
    rc = ADD_NODE(graph_add_empty_node, GRAPH_ADD_EMPTY_NODE, m, node);
    return GC_T(rc);
}

/* The nodes of a graph and their types, as the worker lists them. */
struct node_list {
    CUgraphNode *nodes;
    size_t cap, count;
    CUgraphNodeType *types;
};

static CUresult keep_nodes(void *reply, void *arg) {
    const struct gw_graph_nodes_reply *r = reply;
    struct node_list *l = arg;
    l->count = r->nodes_len / 8;
    for (size_t i = 0; i < l->count && i < l->cap; i++) {
        uint64_t id;
        memcpy(&id, r->nodes + 8 * i, 8);
        if (l->nodes) l->nodes[i] = GC_PTR(CUgraphNode, id);
        if (l->types && i < r->types_count) l->types[i] = (CUgraphNodeType)r->types[i];
    }
    return CUDA_SUCCESS;
}

static CUresult list_nodes(CUgraph graph, struct node_list *l) {
    struct gw_graph_get_nodes m = {.graph = GC_ID(graph)};
    GC_ENCODE(graph_get_nodes, m, b);
    struct gw_graph_nodes_reply r;
    return gc_request_keep(GW_TYPE_GRAPH_GET_NODES, 0, b, b_n, NULL, 0, GW_TYPE_GRAPH_NODES_REPLY, &r, keep_nodes, l);
}

EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
    if (!count) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct node_list l = {.nodes = nodes, .cap = nodes ? *count : 0};
    CUresult rc = list_nodes(graph, &l);
    if (rc == CUDA_SUCCESS) *count = l.count;
    return GC_T(rc);
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    if (!exec) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_graph_instantiate m = {.graph = GC_ID(graph), .flags = flags};
    GC_ENCODE(graph_instantiate, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_GRAPH_INSTANTIATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *exec = GC_PTR(CUgraphExec, h), gc_graphhost_instantiated(graph, *exec);
    if (rc == CUDA_SUCCESS && (rc = gc_stage_instantiated(*exec)) != CUDA_SUCCESS) {
        cuGraphExecDestroy(*exec);
        *exec = NULL;
    }
    return GC_T(rc);
}

/* CUDA 11's form: an error node and a log buffer, left empty. */
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t log_n) {
    if (err) *err = NULL;
    if (log && log_n) log[0] = 0;
    return cuGraphInstantiateWithFlags(exec, graph, 0);
}
ALIAS(cuGraphInstantiate, cuGraphInstantiate_v2);

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
    if (!exec) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (gc_stage_count(exec)) return GC_T(gc_stage_launch(exec, s)); /* host nodes: graphstage.c */
    struct gw_graph_launch m = {.exec = GC_ID(exec), .stream = gc_stream_handle(s)};
    GC_ENCODE(graph_launch, m, b);
    CUresult rc = gc_graphhost_before_launch(exec, s); /* host copies' bytes: graphhost.c */
    /* Asynchronous, as a kernel launch. */
    if (rc == CUDA_SUCCESS) rc = gc_call_status(GW_TYPE_GRAPH_LAUNCH, GW_FLAG_NO_REPLY, b, b_n);
    if (rc == CUDA_SUCCESS) rc = gc_graphhost_after_launch(exec, s);
    return GC_T(rc);
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
    struct gw_graph_exec_destroy m = {.exec = GC_ID(exec)};
    GC_ENCODE(graph_exec_destroy, m, b);
    CUresult rc = gc_call_status(GW_TYPE_GRAPH_EXEC_DESTROY, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_graphhost_exec_destroyed(exec), gc_stage_forget(exec);
    return GC_T(rc);
}

static CUresult exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResult *result) {
    struct gw_graph_exec_update m = {.exec = GC_ID(exec), .graph = GC_ID(graph)};
    GC_ENCODE(graph_exec_update, m, b);
    struct gw_value_reply r = {0};
    CUresult rc = gc_request(GW_TYPE_GRAPH_EXEC_UPDATE, 0, b, b_n, GW_TYPE_VALUE_REPLY, &r);
    if (rc == CUDA_SUCCESS) gc_graphhost_exec_updated(exec, graph); /* its copies are now graph's */
    if (rc == CUDA_SUCCESS) rc = gc_stage_updated(exec);             /* and its stages */
    if (result) *result = (CUgraphExecUpdateResult)r.value;
    return rc;
}

EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info) {
    CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult rc = exec_update(exec, graph, &res);
    if (info) info->result = res, info->errorNode = NULL, info->errorFromNode = NULL;
    return GC_T(rc);
}

/* CUDA 11's form. */
EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode *err, CUgraphExecUpdateResult *result) {
    if (err) *err = NULL;
    return GC_T(exec_update(exec, graph, result));
}

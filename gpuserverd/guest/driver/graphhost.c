/* Graphs whose copies touch the program's pageable host memory. A graph runs in the worker, the
 * memory lies in this VM: each such copy (a memcpy node, or a copy captured on a stream) becomes a
 * device copy between its device side and a bounce buffer of the copy's size, allocated for it and
 * charged to the session like any allocation. Around each cuGraphLaunch the guest moves the host
 * bytes on the launch stream: into the bounce buffers of host-to-device copies before the launch
 * (the program wrote them before launching), out of those of device-to-host copies after it (a
 * copy to pageable memory waits for its data here, so the bytes are in place before the program's
 * next synchronisation returns, as CUDA's stream order wants).
 *
 * The one difference from NVIDIA's driver: a launch reads the host bytes as they were when it
 * began and writes them when it ends, so a graph that writes a host buffer and reads it back
 * within one launch reads the launch-time bytes. Two launches of one executable graph on
 * different streams at once would share its bounce buffers; NVIDIA orders launches of one
 * executable graph, so only a program relying on that across streams could see it.
 *
 * Who holds which copies: a capture in progress (by its id, which the streams that joined it
 * through events share with the one it began on), a graph, an executable graph. A
 * copy is shared by reference (an executable graph keeps its graph's copies after the graph is
 * destroyed); its bounce buffer is freed with the last reference. */
#include "graphhost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gc_hostcopy {
    int refs;
    int to_device;
    struct gc_side host; /* kind 1, pitch and height filled in */
    CUdeviceptr bounce;  /* w x h x d bytes, packed */
    size_t w, h, d;
};

enum holder_kind { CAPTURE, GRAPH, EXEC };

/* A copy as one holder has it: with its node in the holder's graph (0 when unknown: a launch
 * by stages then moves its bytes before the first stage or after the last). */
struct held {
    struct gc_hostcopy *c;
    uint64_t node;
};

struct holder {
    enum holder_kind kind;
    uint64_t id;
    int invalid; /* a capture that lacks a copy (it failed here) */
    struct held *copies;
    size_t n, cap;
};

static struct holder *holders;
static size_t nholders, cholders;
static pthread_mutex_t holders_mu = PTHREAD_MUTEX_INITIALIZER;

/* The holder (kind, id), made when make is set; NULL if absent or out of memory. holders_mu held. */
static struct holder *holder_locked(enum holder_kind kind, uint64_t id, int make) {
    for (size_t i = 0; i < nholders; i++)
        if (holders[i].kind == kind && holders[i].id == id) return &holders[i];
    if (!make) return NULL;
    if (nholders == cholders) {
        size_t c = cholders ? 2 * cholders : 16;
        struct holder *h = realloc(holders, c * sizeof *h);
        if (!h) return NULL;
        holders = h, cholders = c;
    }
    holders[nholders] = (struct holder){.kind = kind, .id = id};
    return &holders[nholders++];
}

/* Adds c (node: its node in h's graph) to h, taking a new reference. holders_mu held. */
static int hold_locked(struct holder *h, struct gc_hostcopy *c, uint64_t node) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 4;
        struct held *p = realloc(h->copies, cap * sizeof *p);
        if (!p) return 0;
        h->copies = p, h->cap = cap;
    }
    h->copies[h->n++] = (struct held){c, node};
    c->refs++;
    return 1;
}

/* Drops one reference to each of copies[0..n); frees those no one holds (outside holders_mu:
 * freeing is a round trip). */
static void release(struct held *copies, size_t n) {
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&holders_mu);
        int last = --copies[i].c->refs == 0;
        pthread_mutex_unlock(&holders_mu);
        if (last) {
            cuMemFree_v2(copies[i].c->bounce);
            free(copies[i].c);
        }
    }
}

static void release_one(struct gc_hostcopy *c) { release(&(struct held){c, 0}, 1); }

/* Removes holder (kind, id) and releases what it held. */
static void drop(enum holder_kind kind, uint64_t id) {
    pthread_mutex_lock(&holders_mu);
    struct holder *h = holder_locked(kind, id, 0), gone = {0};
    if (h) {
        gone = *h;
        *h = holders[--nholders];
    }
    pthread_mutex_unlock(&holders_mu);
    release(gone.copies, gone.n);
    free(gone.copies);
}

/* Gives what (from, fid) holds to (to, tid) as well, replacing what that held; with pairs (npairs
 * of them: a node of from's graph, then its clone's), nodes are renamed to to's. */
static void share_renamed(enum holder_kind from, uint64_t fid, enum holder_kind to, uint64_t tid, const uint64_t *pairs,
                          size_t npairs) {
    drop(to, tid);
    pthread_mutex_lock(&holders_mu);
    struct holder *f = holder_locked(from, fid, 0);
    size_t n = f ? f->n : 0;
    struct held *copies = n ? malloc(n * sizeof *copies) : NULL;
    if (copies) memcpy(copies, f->copies, n * sizeof *copies);
    struct holder *t = copies ? holder_locked(to, tid, 1) : NULL;
    for (size_t i = 0; t && i < n; i++) {
        uint64_t node = pairs ? 0 : copies[i].node;
        for (size_t j = 0; pairs && j < npairs && copies[i].node; j++)
            if (pairs[2 * j] == copies[i].node) node = pairs[2 * j + 1];
        hold_locked(t, copies[i].c, node);
    }
    pthread_mutex_unlock(&holders_mu);
    free(copies);
}

static void share(enum holder_kind from, uint64_t fid, enum holder_kind to, uint64_t tid) {
    share_renamed(from, fid, to, tid, NULL, 0);
}

/* A new copy with its bounce buffer, one reference (the caller's). */
static CUresult hostcopy_new(int to_device, const struct gc_side *host, size_t w, size_t h, size_t d,
                             struct gc_hostcopy **out) {
    if (w == 0 || h == 0 || d == 0 || h > SIZE_MAX / w || d > SIZE_MAX / (w * h)) return CUDA_ERROR_INVALID_VALUE;
    struct gc_hostcopy *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct gc_hostcopy){.refs = 1, .to_device = to_device, .host = *host, .w = w, .h = h, .d = d};
    if (!c->host.pitch) c->host.pitch = w;
    if (!c->host.height) c->host.height = h;
    if (c->host.pitch < c->host.x + w || c->host.height < c->host.y + h) {
        free(c);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The worker's captures are relaxed (graph.c), so this allocation is allowed during one. */
    CUresult rc = cuMemAlloc_v2(&c->bounce, w * h * d);
    if (rc != CUDA_SUCCESS) {
        free(c);
        return rc;
    }
    *out = c;
    return CUDA_SUCCESS;
}

/* The bounce buffer as a copy side. */
static struct gc_side bounce_side(const struct gc_hostcopy *c) {
    return (struct gc_side){.kind = 2, .ptr = c->bounce, .pitch = c->w, .height = c->h};
}

/* The status of s's capture and its id: asked of the worker only while a capture is under way
 * (every copy with host memory asks). */
static CUstreamCaptureStatus capture_of(CUstream s, uint64_t *id) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    if (!gc_any_capturing()) return CU_STREAM_CAPTURE_STATUS_NONE;
    if (cuStreamGetCaptureInfo(s, &st, &cid) != CUDA_SUCCESS) return CU_STREAM_CAPTURE_STATUS_NONE;
    *id = cid;
    return st;
}

int gc_graphhost_capturing(CUstream s, uint64_t *id) { return capture_of(s, id) == CU_STREAM_CAPTURE_STATUS_ACTIVE; }

CUresult gc_graphhost_capture_copy(int to_device, CUstream s, uint64_t capture, CUdeviceptr dev, void *host,
                                   size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    struct gc_side hs = {.kind = 1, .host = host};
    struct gc_hostcopy *c;
    CUresult rc = hostcopy_new(to_device, &hs, n, 1, 1, &c);
    if (rc == CUDA_SUCCESS) {
        rc = to_device ? cuMemcpyDtoDAsync_v2(dev, c->bounce, n, s) : cuMemcpyDtoDAsync_v2(c->bounce, dev, n, s);
        /* The copy's node is what the capture now depends on (a graph with host nodes launches by
         * stages, and the bytes move with the copy's stage). */
        CUstreamCaptureStatus st;
        const CUgraphNode *deps = NULL;
        size_t ndeps = 0;
        uint64_t node = 0;
        if (rc == CUDA_SUCCESS && cuStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &ndeps) == CUDA_SUCCESS &&
            ndeps == 1)
            node = GC_ID(deps[0]);
        pthread_mutex_lock(&holders_mu);
        struct holder *h = rc == CUDA_SUCCESS ? holder_locked(CAPTURE, capture, 1) : NULL;
        if (rc == CUDA_SUCCESS && !(h && hold_locked(h, c, node))) rc = CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_unlock(&holders_mu);
        release_one(c); /* the holder's reference remains, if any */
    }
    if (rc != CUDA_SUCCESS) { /* the capture is void: it lacks this copy */
        gc_capture_refuses(s); /* the stream it began on: graph.c */
        pthread_mutex_lock(&holders_mu);
        struct holder *h = holder_locked(CAPTURE, capture, 1);
        if (h) h->invalid = 1;
        pthread_mutex_unlock(&holders_mu);
    }
    return rc;
}

uint64_t gc_graphhost_capture_id(CUstream s) {
    int any = 0;
    pthread_mutex_lock(&holders_mu);
    for (size_t i = 0; i < nholders && !any; i++) any = holders[i].kind == CAPTURE;
    pthread_mutex_unlock(&holders_mu);
    uint64_t id = 0;
    if (any && capture_of(s, &id) == CU_STREAM_CAPTURE_STATUS_NONE) id = 0; /* an invalidated one too */
    return id;
}

CUresult gc_graphhost_capture_end(uint64_t capture, CUgraph g) {
    if (!capture) return CUDA_SUCCESS;
    pthread_mutex_lock(&holders_mu);
    struct holder *h = holder_locked(CAPTURE, capture, 0);
    int invalid = h && h->invalid;
    pthread_mutex_unlock(&holders_mu);
    if (g && !invalid) share(CAPTURE, capture, GRAPH, GC_ID(g));
    drop(CAPTURE, capture);
    return invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult gc_graphhost_node_prepare(struct gc_side *src, struct gc_side *dst, size_t w, size_t h, size_t d,
                                   struct gc_hostcopy **out) {
    *out = NULL;
    if (src->kind != 1 && dst->kind != 1) return CUDA_SUCCESS;
    if (src->kind == 1 && dst->kind == 1) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpucloud: cuGraphAddMemcpyNode: host-to-host copies in a graph are not supported "
                            "(CUDA_ERROR_NOT_SUPPORTED); copies between host and device memory are\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    int to_device = src->kind == 1;
    struct gc_side *host = to_device ? src : dst;
    CUresult rc = hostcopy_new(to_device, host, w, h ? h : 1, d ? d : 1, out);
    if (rc == CUDA_SUCCESS) *host = bounce_side(*out);
    return rc;
}

void gc_graphhost_node_done(CUgraph g, CUgraphNode node, struct gc_hostcopy *c, CUresult rc) {
    if (!c) return;
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&holders_mu);
        struct holder *h = holder_locked(GRAPH, GC_ID(g), 1);
        if (h && !hold_locked(h, c, GC_ID(node))) h = NULL;
        pthread_mutex_unlock(&holders_mu);
        if (!h) fprintf(stderr, "gpucloud: out of memory recording a graph's host copy: it will not be refreshed\n");
    }
    release_one(c);
}

void gc_graphhost_cloned(CUgraph g, CUgraph clone, const uint64_t *pairs, size_t npairs) {
    share_renamed(GRAPH, GC_ID(g), GRAPH, GC_ID(clone), pairs, npairs);
}

void gc_graphhost_instantiated(CUgraph g, CUgraphExec x) { share(GRAPH, GC_ID(g), EXEC, GC_ID(x)); }
void gc_graphhost_exec_updated(CUgraphExec x, CUgraph g) { share(GRAPH, GC_ID(g), EXEC, GC_ID(x)); }
void gc_graphhost_graph_destroyed(CUgraph g) { drop(GRAPH, GC_ID(g)); }
void gc_graphhost_exec_destroyed(CUgraphExec x) { drop(EXEC, GC_ID(x)); }

/* The copies of exec x in one direction, each with a new reference (released by the caller), so a
 * concurrent destroy cannot free them mid-copy; *n of them. stage >= 0: only those of that stage
 * of a launch by stages (last: the last stage), a copy of an unknown node counting as stage 0
 * into the device and as the last out of it. */
static struct held *exec_copies(CUgraphExec x, int to_device, int stage, int last, size_t *n) {
    *n = 0;
    if (__atomic_load_n(&nholders, __ATOMIC_RELAXED) == 0) return NULL; /* no host copies at all */
    pthread_mutex_lock(&holders_mu);
    struct holder *h = holder_locked(EXEC, GC_ID(x), 0);
    struct held *out = h && h->n ? malloc(h->n * sizeof *out) : NULL;
    for (size_t i = 0; out && i < h->n; i++) {
        struct held e = h->copies[i];
        if (e.c->to_device != to_device) continue;
        if (stage >= 0) {
            int at = e.node ? gc_stage_of(x, e.node) : -1;
            if ((at < 0 ? (to_device ? 0 : last) : at) != stage) continue;
        }
        out[(*n)++] = e, e.c->refs++;
    }
    pthread_mutex_unlock(&holders_mu);
    return out;
}

/* Host bytes to or from c's bounce buffer on s: one copy when the host box is contiguous. */
static CUresult move_bytes(const struct gc_hostcopy *c, CUstream s) {
    const struct gc_side *hs = &c->host;
    int contiguous = hs->pitch == c->w && (c->d == 1 || hs->height == c->h);
    if (contiguous) {
        char *at = (char *)hs->host + (hs->z * hs->height + hs->y) * hs->pitch + hs->x;
        size_t n = c->w * c->h * c->d;
        return c->to_device ? cuMemcpyHtoDAsync_v2(c->bounce, at, n, s) : cuMemcpyDtoHAsync_v2(at, c->bounce, n, s);
    }
    struct gc_side b = bounce_side(c);
    return c->to_device ? gc_copy3d(hs, &b, c->w, c->h, c->d, s, 1) : gc_copy3d(&b, hs, c->w, c->h, c->d, s, 1);
}

static CUresult move_all(CUgraphExec x, CUstream s, int to_device, int stage, int last) {
    size_t n;
    struct held *copies = exec_copies(x, to_device, stage, last, &n);
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < n && rc == CUDA_SUCCESS; i++) rc = move_bytes(copies[i].c, s);
    release(copies, n);
    free(copies);
    return rc;
}

CUresult gc_graphhost_before_launch(CUgraphExec x, CUstream s) { return move_all(x, s, 1, -1, 0); }
CUresult gc_graphhost_after_launch(CUgraphExec x, CUstream s) { return move_all(x, s, 0, -1, 0); }
CUresult gc_graphhost_move_stage(CUgraphExec x, CUstream s, int to_device, int stage, int last) {
    return move_all(x, s, to_device, stage, last);
}

/* gpucloud's libnccl.so.2: NCCL for the ranks of one gpucloud instance. Unique ids come from the
 * session's worker and belong to the instance: any of its sessions (its processes, one per GPU as
 * torchrun starts them, or one process with several GPUs) may join one, another instance's may
 * not. The worker runs each communicator as a rank of the backend's NCCL (NVIDIA's on a GPU);
 * collectives go to it without waiting for a reply, in stream order, and group calls go as NCCL
 * groups (see docs/multi-gpu.md). The library reaches the session through gpucloud's libcuda's
 * private table; over NVIDIA's libcuda it refuses to start, saying why. */
#include "nccl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"

#define EXPORT __attribute__((visibility("default")))

/* gpuserverd's CUDA backend refuses a libnccl.so.2 with this symbol: this library in a worker would
 * forward the worker's own calls to itself. */
EXPORT const int gpucloud_nccl_guest = 1;

static const struct gc_private_table *T;
static int t_ok;
static pthread_once_t t_once = PTHREAD_ONCE_INIT;

static void load_table(void) {
    T = gc_table_load("libnccl");
    t_ok = T != NULL;
}

static int ready(void) {
    pthread_once(&t_once, load_table);
    return t_ok;
}

/* The unique id's first bytes: gpucloud's mark, then the worker's 16 random bytes. */
static const char id_mark[8] = {'g', 'p', 'u', 'c', 'l', 'd', 'n', 1};

#define COMM_MAGIC 0x6e63636cu
struct ncclComm {
    uint32_t magic;
    uint64_t server;
    int rank, nranks, device;
    struct ncclComm *next;
};
static struct ncclComm *live;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread char last_error[256];

static ncclResult_t fail(ncclResult_t r, const char *fmt, const char *what) {
    snprintf(last_error, sizeof last_error, fmt, what);
    if (getenv("NCCL_DEBUG") || getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud libnccl: %s\n", last_error);
    return r;
}

static int is_live(ncclComm_t c) {
    pthread_mutex_lock(&live_mu);
    struct ncclComm *p = live;
    while (p && p != c) p = p->next;
    int ok = p && p->magic == COMM_MAGIC;
    pthread_mutex_unlock(&live_mu);
    return ok;
}

/* on_device makes a context current on device where the thread has none (as NCCL's callers
 * expect the runtime to); requests travel on the current context. */
static int on_device(int device) {
    int cur;
    if (T->current_device(&cur) == CUDA_SUCCESS) return 0;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, device) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) return -1;
    return 0;
}

/* call sends one request answered by NcclReply and returns its NCCL status; with r NULL it goes
 * without a reply (a failure is the communicator's asynchronous error). */
static ncclResult_t call(uint16_t type, const uint8_t *b, size_t n, int device, struct gw_nccl_reply *r, const char *what) {
    if (!ready()) return fail(ncclSystemError, "%s: no gpucloud session", what);
    if (on_device(device) != 0) return fail(ncclUnhandledCudaError, "%s: no CUDA context", what);
    if (r == NULL) {
        CUresult rc = T->request(type, GW_FLAG_NO_REPLY, b, n, GW_TYPE_NCCL_REPLY, NULL);
        return rc == CUDA_SUCCESS ? ncclSuccess : fail(ncclUnhandledCudaError, "%s: the session failed", what);
    }
    memset(r, 0, sizeof *r);
    CUresult rc = T->request(type, 0, b, n, GW_TYPE_NCCL_REPLY, r);
    if (r->status != 0) {
        snprintf(last_error, sizeof last_error, "%s: %.*s", what, (int)r->message_len, r->message); /* not NUL-terminated */
        if (getenv("NCCL_DEBUG") || getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud libnccl: %s\n", last_error);
        return (ncclResult_t)r->status;
    }
    if (rc != CUDA_SUCCESS) return fail(ncclUnhandledCudaError, "%s: the session failed", what);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(ncclInvalidArgument, "%s: version is NULL", "ncclGetVersion");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return fail(ncclInvalidArgument, "%s: uniqueId is NULL", "ncclGetUniqueId");
    struct gw_nccl_reply r;
    ncclResult_t s = call(GW_TYPE_NCCL_GET_UNIQUE_ID, NULL, 0, 0, &r, "ncclGetUniqueId");
    if (s != ncclSuccess) return s;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, id_mark, sizeof id_mark);
    memcpy(id->internal + 8, &r.id0, 8);
    memcpy(id->internal + 16, &r.id1, 8);
    return ncclSuccess;
}

/* track makes the guest's handle of the worker's communicator server. */
static ncclResult_t track(ncclComm_t *comm, uint64_t server, int rank, int nranks, int device, const char *what) {
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return fail(ncclSystemError, "%s: out of memory", what);
    *c = (struct ncclComm){.magic = COMM_MAGIC, .server = server, .rank = rank, .nranks = nranks, .device = device};
    pthread_mutex_lock(&live_mu);
    c->next = live;
    live = c;
    pthread_mutex_unlock(&live_mu);
    *comm = c;
    return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, int device) {
    if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", "ncclCommInitRank");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "%s: rank or nranks out of range", "ncclCommInitRank");
    if (memcmp(id->internal, id_mark, sizeof id_mark) != 0)
        return fail(ncclInvalidArgument, "%s: not a unique id from ncclGetUniqueId", "ncclCommInitRank");
    struct gw_nccl_comm_init m = {.nranks = (uint32_t)nranks, .rank = (uint32_t)rank, .device = (uint32_t)device};
    memcpy(&m.id0, id->internal + 8, 8);
    memcpy(&m.id1, id->internal + 16, 8);
    uint8_t b[64];
    size_t n = gw_nccl_comm_init_size(&m);
    gw_nccl_comm_init_encode(&m, b);
    struct gw_nccl_reply r;
    ncclResult_t s = call(GW_TYPE_NCCL_COMM_INIT, b, n, device, &r, "ncclCommInitRank");
    if (s != ncclSuccess) return s;
    return track(comm, r.comm, rank, nranks, device, "ncclCommInitRank");
}

/* The rank's device is the calling thread's current one (device 0 without a context), as NCCL
 * takes cudaGetDevice's. */
static int current_device(void) {
    int d = 0;
    if (ready() && T->current_device(&d) != CUDA_SUCCESS) d = 0;
    return d;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return init_rank(comm, nranks, &id, rank, current_device());
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    /* The worker's communicators are blocking ones: a nonblocking caller sees ncclSuccess at once,
     * which NCCL allows; CTA and network hints are the worker's NCCL's own business. */
    (void)config;
    return init_rank(comm, nranks, &id, rank, current_device());
}

/* Several roots only spread NCCL's bootstrap over more processes: with one id it is
 * ncclCommInitRankConfig; the worker's NCCL has its own bootstrap, so several ids are refused. */
EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nIds, ncclUniqueId *ids,
                                             ncclConfig_t *config) {
    (void)config;
    if (nIds != 1 || !ids) return fail(ncclInvalidUsage, "%s with other than one unique id is not supported by gpucloud's NCCL", "ncclCommInitRankScalable");
    return init_rank(comm, nranks, ids, rank, current_device());
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms || ndev < 1) return fail(ncclInvalidArgument, "%s: comms NULL or ndev < 1", "ncclCommInitAll");
    ncclUniqueId id;
    ncclResult_t s = ncclGetUniqueId(&id);
    if (s != ncclSuccess) return s;
    /* One thread makes every rank: a group, as NCCL's own ncclCommInitAll does. */
    s = ncclGroupStart();
    for (int i = 0; i < ndev && s == ncclSuccess; i++) s = init_rank(&comms[i], ndev, &id, i, devlist ? devlist[i] : i);
    ncclResult_t e = ncclGroupEnd();
    return s != ncclSuccess ? s : e;
}

static void forget(ncclComm_t comm) {
    pthread_mutex_lock(&live_mu);
    for (struct ncclComm **p = &live; *p; p = &(*p)->next)
        if (*p == comm) {
            *p = comm->next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    comm->magic = 0;
    free(comm);
}

static ncclResult_t destroy(ncclComm_t comm, const char *what) {
    if (!is_live(comm)) return fail(ncclInvalidArgument, "%s: not a live communicator", what);
    struct gw_nccl_comm_destroy m = {.comm = comm->server};
    uint8_t b[16];
    size_t n = gw_nccl_comm_destroy_size(&m);
    gw_nccl_comm_destroy_encode(&m, b);
    struct gw_nccl_reply r;
    ncclResult_t s = call(GW_TYPE_NCCL_COMM_DESTROY, b, n, comm->device, &r, what);
    forget(comm);
    return s;
}

/* query sends NcclCommQuery (what: 0 async error, 1 finalize, 2 abort) and returns its status. */
static ncclResult_t query(ncclComm_t comm, uint32_t what, const char *name) {
    if (!is_live(comm)) return fail(ncclInvalidArgument, "%s: not a live communicator", name);
    struct gw_nccl_comm_query m = {.comm = comm->server, .what = what};
    uint8_t b[32];
    size_t n = gw_nccl_comm_query_size(&m);
    gw_nccl_comm_query_encode(&m, b);
    struct gw_nccl_reply r;
    return call(GW_TYPE_NCCL_COMM_QUERY, b, n, comm->device, &r, name);
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { return comm ? destroy(comm, "ncclCommDestroy") : ncclSuccess; }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    ncclResult_t s = query(comm, 2, "ncclCommAbort");
    if (is_live(comm)) forget(comm);
    return s;
}
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return query(comm, 1, "ncclCommFinalize"); }

/* The communicator's error: a collective sent without a reply that failed in the worker. */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    if (!is_live(comm) || !err) return fail(ncclInvalidArgument, "%s: bad communicator or argument", "ncclCommGetAsyncError");
    ncclResult_t s = query(comm, 0, "ncclCommGetAsyncError");
    if (s == ncclUnhandledCudaError || s == ncclSystemError) return s; /* the session itself failed */
    *err = s;
    return ncclSuccess;
}

#define COMM_GETTER(name, field)                                                                     \
    EXPORT ncclResult_t name(const ncclComm_t comm, int *out) {                                      \
        if (!is_live(comm) || !out) return fail(ncclInvalidArgument, "%s: bad communicator or argument", #name); \
        *out = comm->field;                                                                          \
        return ncclSuccess;                                                                          \
    }
COMM_GETTER(ncclCommCount, nranks)
COMM_GETTER(ncclCommCuDevice, device)
COMM_GETTER(ncclCommUserRank, rank)

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

EXPORT const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return last_error;
}

/* ---- communicators from communicators, reduction ops ---- */

static const unsigned char type_size[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

/* ncclCommSplit: the worker's NCCL splits its communicator (a collective of every rank); the new
 * rank is on the parent's device. config is the worker's NCCL's business (defaults). */
EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    (void)config;
    if (!is_live(comm) || !newcomm) return fail(ncclInvalidArgument, "%s: bad communicator or argument", "ncclCommSplit");
    struct gw_nccl_comm_split m = {.comm = comm->server, .color = color, .key = key};
    uint8_t b[32];
    size_t n = gw_nccl_comm_split_size(&m);
    gw_nccl_comm_split_encode(&m, b);
    struct gw_nccl_reply r;
    ncclResult_t s = call(GW_TYPE_NCCL_COMM_SPLIT, b, n, comm->device, &r, "ncclCommSplit");
    if (s != ncclSuccess) return s;
    *newcomm = NULL;
    if (r.comm == 0) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR */
    return track(newcomm, r.comm, (int)r.id0, (int)r.id1, comm->device, "ncclCommSplit");
}

EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
    if (!is_live(comm) || !op || !scalar || (unsigned)datatype >= ncclNumTypes || (unsigned)residence > 1)
        return fail(ncclInvalidArgument, "%s: bad communicator or argument", "ncclRedOpCreatePreMulSum");
    struct gw_nccl_red_op m = {.comm = comm->server, .create = 1, .datatype = (uint32_t)datatype,
                               .residence = (uint32_t)residence};
    if (residence == ncclScalarHostImmediate)
        memcpy(&m.scalar, scalar, type_size[datatype]); /* read now, as NCCL does */
    else
        m.scalar = (uint64_t)(uintptr_t)scalar; /* a device address, read at each use */
    uint8_t b[64];
    size_t n = gw_nccl_red_op_size(&m);
    gw_nccl_red_op_encode(&m, b);
    struct gw_nccl_reply r;
    ncclResult_t s = call(GW_TYPE_NCCL_RED_OP, b, n, comm->device, &r, "ncclRedOpCreatePreMulSum");
    if (s == ncclSuccess) *op = (ncclRedOp_t)r.comm;
    return s;
}

EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
    if (!is_live(comm)) return fail(ncclInvalidArgument, "%s: not a live communicator", "ncclRedOpDestroy");
    struct gw_nccl_red_op m = {.comm = comm->server, .create = 0, .op = (uint32_t)op};
    uint8_t b[64];
    size_t n = gw_nccl_red_op_size(&m);
    gw_nccl_red_op_encode(&m, b);
    struct gw_nccl_reply r;
    return call(GW_TYPE_NCCL_RED_OP, b, n, comm->device, &r, "ncclRedOpDestroy");
}

/* ---- collectives ---- */

enum { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND, RECV };

static ncclResult_t post(uint32_t kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         int peer, ncclComm_t comm, CUstream stream, const char *what) {
    if (!is_live(comm)) return fail(ncclInvalidArgument, "%s: not a live communicator", what);
    if ((unsigned)dt >= ncclNumTypes) return fail(ncclInvalidArgument, "%s: data type not supported", what);
    if ((int)op < 0) return fail(ncclInvalidArgument, "%s: reduction op not supported", what); /* the worker knows the comm's own */
    if (peer < 0 || peer >= comm->nranks) return fail(ncclInvalidArgument, "%s: root or peer out of range", what);
    if (!ready()) return fail(ncclSystemError, "%s: no gpucloud session", what);
    struct gw_nccl_collective m = {.comm = comm->server, .kind = kind, .send = (uint64_t)(uintptr_t)send,
                                   .recv = (uint64_t)(uintptr_t)recv, .count = count, .datatype = (uint32_t)dt,
                                   .op = (uint32_t)op, .peer = peer, .stream = T->stream_handle(stream)};
    uint8_t b[96];
    size_t n = gw_nccl_collective_size(&m);
    gw_nccl_collective_encode(&m, b);
    return call(GW_TYPE_NCCL_COLLECTIVE, b, n, comm->device, NULL, what); /* stream-ordered: no reply */
}

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                  ncclComm_t comm, CUstream st) {
    return post(ALL_REDUCE, s, r, count, dt, op, 0, comm, st, "ncclAllReduce");
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                                  CUstream st) {
    return post(BROADCAST, s, r, count, dt, ncclSum, root, comm, st, "ncclBroadcast");
}
EXPORT ncclResult_t ncclBcast(void *buf, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, CUstream st) {
    return post(BROADCAST, buf, buf, count, dt, ncclSum, root, comm, st, "ncclBcast");
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root,
                               ncclComm_t comm, CUstream st) {
    return post(REDUCE, s, r, count, dt, op, root, comm, st, "ncclReduce");
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t dt, ncclComm_t comm, CUstream st) {
    return post(ALL_GATHER, s, r, count, dt, ncclSum, 0, comm, st, "ncclAllGather");
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                      ncclComm_t comm, CUstream st) {
    return post(REDUCE_SCATTER, s, r, count, dt, op, 0, comm, st, "ncclReduceScatter");
}
EXPORT ncclResult_t ncclSend(const void *s, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, CUstream st) {
    return post(SEND, s, NULL, count, dt, ncclSum, peer, comm, st, "ncclSend");
}
EXPORT ncclResult_t ncclRecv(void *r, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, CUstream st) {
    return post(RECV, NULL, r, count, dt, ncclSum, peer, comm, st, "ncclRecv");
}

/* Groups are the worker's NCCL groups: what the thread calls between start and end (ranks made,
 * collectives posted) is one group there, completed by the end. The start goes without a reply. */
static __thread int group_depth;
static ncclResult_t group(uint32_t start, const char *what) {
    struct gw_nccl_group m = {.start = start};
    uint8_t b[16];
    size_t n = gw_nccl_group_size(&m);
    gw_nccl_group_encode(&m, b);
    struct gw_nccl_reply r;
    return call(GW_TYPE_NCCL_GROUP, b, n, current_device(), start ? NULL : &r, what);
}
EXPORT ncclResult_t ncclGroupStart(void) {
    ncclResult_t s = group(1, "ncclGroupStart");
    if (s == ncclSuccess) group_depth++;
    return s;
}
EXPORT ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "%s without ncclGroupStart", "ncclGroupEnd");
    group_depth--;
    return group(0, "ncclGroupEnd");
}

/* ---- the rest of NCCL's API: refused cleanly ---- */

#define REFUSED(name)                                                                                 \
    EXPORT ncclResult_t name(void) { return fail(ncclInvalidUsage, "%s is not supported by gpucloud's NCCL", #name); }
REFUSED(ncclMemAlloc)
REFUSED(ncclMemFree)
REFUSED(ncclCommRevoke)
REFUSED(ncclCommShrink)
REFUSED(ncclCommRegister)
REFUSED(ncclCommDeregister)
REFUSED(ncclCommWindowRegister)
REFUSED(ncclCommWindowDeregister)
REFUSED(ncclAlltoAll)
REFUSED(ncclGather)
REFUSED(ncclScatter)
REFUSED(ncclGroupSimulateEnd)

/* NCCL 2.28's device API (nccl_device/ headers), whose host functions PyTorch 2.11's libtorch_cuda
 * links (symmetric memory): a device communicator runs NCCL's kernels against peers' memory,
 * which a session cannot map, so it is refused; teams answer for this rank alone as its
 * load/store-accessible (LSA) team, and the whole communicator as the world. */
REFUSED(ncclDevCommCreate)
REFUSED(ncclDevCommDestroy)
REFUSED(ncclGinBarrierCreateRequirement)
REFUSED(ncclLsaBarrierCreateRequirement)
REFUSED(ncclLLA2ACreateRequirement)
struct gc_team { /* nccl_device/core.h's struct ncclTeam */
    int n_ranks, rank, stride;
};
EXPORT struct gc_team ncclTeamWorld(ncclComm_t c) {
    return is_live(c) ? (struct gc_team){c->nranks, c->rank, 1} : (struct gc_team){0, 0, 0};
}
EXPORT struct gc_team ncclTeamLsa(ncclComm_t c) {
    return is_live(c) ? (struct gc_team){1, 0, 1} : (struct gc_team){0, 0, 0};
}
/* a team's rank as a world rank: the team's ranks are stride apart, this rank among them */
EXPORT int ncclTeamRankToWorld(ncclComm_t c, struct gc_team t, int rank) {
    if (!is_live(c) || rank < 0 || rank >= t.n_ranks) return -1;
    return c->rank + (rank - t.rank) * t.stride;
}
/* a rank of the LSA team (this rank alone) from its rank in team t */
EXPORT int ncclTeamRankToLsa(ncclComm_t c, struct gc_team t, int rank) {
    return ncclTeamRankToWorld(c, t, rank) == (is_live(c) ? c->rank : -2) ? 0 : -1;
}
EXPORT int ncclLLA2ACalcSlots(int max_elts, int max_elt_size) { /* no LL all-to-all: no slots */
    (void)max_elts, (void)max_elt_size;
    return 0;
}

/* gpucloud's libcusolver.so.12: the session with gpuserverd, the generic call and the functions
 * written by hand (streams, versions). See solver.h. */
#include "solver.h"

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
GC_EXPORT const int gpucloud_cusolver_guest = 1;

static const struct gc_private_table *T;
static pthread_once_t t_once = PTHREAD_ONCE_INIT;

static void load_table(void) { T = gc_table_load("libcusolver"); }

/* ready reaches the session and makes device 0's primary context current where the calling
 * thread has none (as NVIDIA's runtime does lazily). */
static int ready(void) {
    pthread_once(&t_once, load_table);
    if (!T) return 0;
    int dev;
    if (T->current_device(&dev) == CUDA_SUCCESS) return 1;
    CUcontext c;
    return cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS && cuCtxSetCurrent(c) == CUDA_SUCCESS;
}

cusolverStatus_t gc_solver_refuse(int *said, const char *name, const char *why) {
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "gpucloud libcusolver: %s is not forwarded to gpuserverd (%s): CUSOLVER_STATUS_NOT_SUPPORTED\n",
                name, why);
    return CUSOLVER_STATUS_NOT_SUPPORTED;
}

uint64_t gc_solver_stream(cudaStream_t s) { return T ? T->stream_handle((CUstream)s) : 0; }

/* ---- each handle's stream, for cusolverDnGetStream ---- */

struct stream_of {
    uint64_t handle;
    cudaStream_t stream;
    struct stream_of *next;
};
static struct stream_of *streams;
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;

/* remember sets (or with forget, drops) the stream of handle h. */
static void remember(uint64_t h, cudaStream_t s, int forget) {
    pthread_mutex_lock(&streams_mu);
    struct stream_of **p = &streams;
    while (*p && (*p)->handle != h) p = &(*p)->next;
    if (forget) {
        if (*p) {
            struct stream_of *gone = *p;
            *p = gone->next;
            free(gone);
        }
    } else if (*p) {
        (*p)->stream = s;
    } else if ((*p = calloc(1, sizeof **p)) != NULL) {
        (*p)->handle = h;
        (*p)->stream = s;
    }
    pthread_mutex_unlock(&streams_mu);
}

/* ---- the generic call ---- */

cusolverStatus_t gc_solver_call(const struct gc_solver_fn *f, uint64_t *w, void *const *o) {
    if (!ready()) return CUSOLVER_STATUS_NOT_INITIALIZED;
    int outs = 0;
    for (int i = 0; i < f->nargs; i++) {
        const struct gc_solver_arg *a = &f->args[i];
        if (a->kind == GC_OBJECT && w[i] == 0 && !a->nullable) /* a NULL handle or info (params only where NVIDIA takes no NULL) */
            return i == 0 ? CUSOLVER_STATUS_NOT_INITIALIZED : CUSOLVER_STATUS_INVALID_VALUE;
        if ((a->kind == GC_NEW || a->kind == GC_OUT) && w[i]) outs++;
        if (a->kind == GC_OUTARRAY && w[i]) {
            if ((int64_t)w[a->ref] < 0) return CUSOLVER_STATUS_INVALID_VALUE;
            if (w[a->ref] > GW_SOLVER_MAX_OUT) {
                static int said;
                return gc_solver_refuse(&said, f->name, "a host output array of more than 16 elements");
            }
            outs += (int)w[a->ref];
        }
    }
    if (outs > GW_SOLVER_MAX_OUT) {
        static int said;
        return gc_solver_refuse(&said, f->name, "more than 16 words of host outputs");
    }
    uint8_t args[8 * 32];
    if (f->nargs > 32) return CUSOLVER_STATUS_INTERNAL_ERROR;
    for (int i = 0; i < f->nargs; i++)
        for (int b = 0; b < 8; b++) args[8 * i + b] = (uint8_t)(w[i] >> (8 * b));
    struct gw_solver_call m = {.fn = f->id, .args = args, .args_len = (uint32_t)(8 * f->nargs)};
    uint8_t buf[16 + sizeof args];
    gw_solver_call_encode(&m, buf);
    struct gw_solver_reply r;
    memset(&r, 0, sizeof r);
    CUresult rc = T->request(GW_TYPE_SOLVER_CALL, f->async ? GW_FLAG_NO_REPLY : 0, buf, gw_solver_call_size(&m),
                             GW_TYPE_SOLVER_REPLY, &r);
    if (f->async) return rc == CUDA_SUCCESS ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_EXECUTION_FAILED;
    if (r.status != 0) {
        if (getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud libcusolver: %s failed in gpuserverd (status %d)\n", f->name, r.status);
        return (cusolverStatus_t)r.status;
    }
    if (rc != CUDA_SUCCESS) /* no cuSOLVER status: the session itself failed */
        return rc == CUDA_ERROR_INVALID_CONTEXT ? CUSOLVER_STATUS_NOT_INITIALIZED : CUSOLVER_STATUS_INTERNAL_ERROR;
    const uint64_t out[GW_SOLVER_MAX_OUT] = {r.o0, r.o1, r.o2, r.o3, r.o4, r.o5, r.o6, r.o7,
                                             r.o8, r.o9, r.o10, r.o11, r.o12, r.o13, r.o14, r.o15};
    int k = 0;
    for (int i = 0; i < f->nargs; i++) {
        const struct gc_solver_arg *a = &f->args[i];
        if (!w[i]) continue;
        switch (a->kind) {
        case GC_NEW:
            *(void **)o[i] = (void *)(uintptr_t)out[k++];
            break;
        case GC_OUT:
            memcpy(o[i], &out[k++], a->size); /* little-endian: the low bytes */
            break;
        case GC_OUTARRAY:
            memcpy(o[i], &out[k], 8 * w[a->ref]);
            k += (int)w[a->ref];
            break;
        }
    }
    if (f->destroy) remember(w[0], NULL, 1);
    return CUSOLVER_STATUS_SUCCESS;
}

/* ---- written by hand ---- */

GC_EXPORT cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t streamId) {
    static const struct gc_solver_arg k[] = {{GC_OBJECT, 0, 0, 0}, {GC_STREAM, 0, 0, 0}};
    static const struct gc_solver_fn f = {11308, "cusolverDnSetStream", 2, 1, 0, k};
    if (!ready()) return CUSOLVER_STATUS_NOT_INITIALIZED;
    uint64_t w[] = {(uint64_t)(uintptr_t)handle, gc_solver_stream(streamId)};
    cusolverStatus_t st = gc_solver_call(&f, w, (void *const[]){NULL, NULL});
    if (st == CUSOLVER_STATUS_SUCCESS) remember(w[0], streamId, 0);
    return st;
}

GC_EXPORT cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t handle, cudaStream_t *streamId) {
    if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (!streamId) return CUSOLVER_STATUS_INVALID_VALUE;
    cudaStream_t s = NULL; /* a handle starts on the default stream */
    pthread_mutex_lock(&streams_mu);
    for (struct stream_of *c = streams; c; c = c->next)
        if (c->handle == (uint64_t)(uintptr_t)handle) s = c->stream;
    pthread_mutex_unlock(&streams_mu);
    *streamId = s;
    return CUSOLVER_STATUS_SUCCESS;
}

/* The cuSOLVER release whose API this library remotes (cusolver_common.h of CUDA 13.0). */
enum { VER_MAJOR = 12, VER_MINOR = 0, VER_PATCH = 4 };

GC_EXPORT cusolverStatus_t cusolverGetVersion(int *version) {
    if (!version) return CUSOLVER_STATUS_INVALID_VALUE;
    *version = VER_MAJOR * 1000 + VER_MINOR * 100 + VER_PATCH;
    return CUSOLVER_STATUS_SUCCESS;
}

/* type: libraryPropertyType (MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2). */
GC_EXPORT cusolverStatus_t cusolverGetProperty(int type, int *value) {
    if (!value) return CUSOLVER_STATUS_INVALID_VALUE;
    switch (type) {
    case 0: *value = VER_MAJOR; return CUSOLVER_STATUS_SUCCESS;
    case 1: *value = VER_MINOR; return CUSOLVER_STATUS_SUCCESS;
    case 2: *value = VER_PATCH; return CUSOLVER_STATUS_SUCCESS;
    }
    return CUSOLVER_STATUS_INVALID_VALUE;
}

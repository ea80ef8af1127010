/* gpucloud's libcusolver.so.12: cuSOLVER remoted to gpuserverd through the generic library call
 * (SolverCall; backend/libcall.go). Handles, params and infos are the worker's ids. calls_gen.c has
 * every function of NVIDIA's headers that returns a status; this file keeps each handle's stream
 * (for cusolverDnGetStream) and what answers without the server (versions). */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cusolver_guest = 1;

GC_LIBCALL_DEFINE("libcusolver", solver, SOLVER, CUSOLVER_STATUS_NOT_INITIALIZED, CUSOLVER_STATUS_INTERNAL_ERROR)

int gcr_cusolverDnSetStream(void *handle, void *streamId);
int gcr_cusolverSpSetStream(void *handle, void *streamId);

/* ---- each handle's stream (dense and sparse handles alike: the worker's distinct ids), for
 * cusolverDnGetStream and cusolverSpGetStream ---- */

struct stream_of {
    uintptr_t handle;
    void *stream;
    struct stream_of *next;
};
static struct stream_of *streams;
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;

static void remember_stream(void *handle, void *streamId) {
    pthread_mutex_lock(&streams_mu);
    struct stream_of **p = &streams;
    while (*p && (*p)->handle != (uintptr_t)handle) p = &(*p)->next;
    if (!*p && (*p = calloc(1, sizeof **p)) != NULL) (*p)->handle = (uintptr_t)handle;
    if (*p) (*p)->stream = streamId;
    pthread_mutex_unlock(&streams_mu);
}

static int stream_of(void *handle, void **streamId) {
    if (!handle) return CUSOLVER_STATUS_NOT_INITIALIZED;
    if (!streamId) return CUSOLVER_STATUS_INVALID_VALUE;
    void *s = NULL; /* a handle starts on the default stream */
    pthread_mutex_lock(&streams_mu);
    for (struct stream_of *c = streams; c; c = c->next)
        if (c->handle == (uintptr_t)handle) s = c->stream;
    pthread_mutex_unlock(&streams_mu);
    *streamId = s;
    return CUSOLVER_STATUS_SUCCESS;
}

EXPORT int cusolverDnSetStream(void *handle, void *streamId) {
    int st = gcr_cusolverDnSetStream(handle, streamId);
    if (st == CUSOLVER_STATUS_SUCCESS) remember_stream(handle, streamId);
    return st;
}

EXPORT int cusolverSpSetStream(void *handle, void *streamId) {
    int st = gcr_cusolverSpSetStream(handle, streamId);
    if (st == CUSOLVER_STATUS_SUCCESS) remember_stream(handle, streamId);
    return st;
}

EXPORT int cusolverDnGetStream(void *handle, void **streamId) { return stream_of(handle, streamId); }
EXPORT int cusolverSpGetStream(void *handle, void **streamId) { return stream_of(handle, streamId); }

/* The cuSOLVER release whose API this library remotes (cusolver_common.h of CUDA 13.0). */
enum { VER_MAJOR = 12, VER_MINOR = 0, VER_PATCH = 4 };

EXPORT int cusolverGetVersion(int *version) {
    if (!version) return CUSOLVER_STATUS_INVALID_VALUE;
    *version = VER_MAJOR * 1000 + VER_MINOR * 100 + VER_PATCH;
    return CUSOLVER_STATUS_SUCCESS;
}

/* type: libraryPropertyType (MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2). */
EXPORT int cusolverGetProperty(int type, int *value) {
    if (!value) return CUSOLVER_STATUS_INVALID_VALUE;
    switch (type) {
    case 0: *value = VER_MAJOR; return CUSOLVER_STATUS_SUCCESS;
    case 1: *value = VER_MINOR; return CUSOLVER_STATUS_SUCCESS;
    case 2: *value = VER_PATCH; return CUSOLVER_STATUS_SUCCESS;
    }
    return CUSOLVER_STATUS_INVALID_VALUE;
}

/* The guest libcuda's session, as gpucloud's vendor-library stand-ins (libcublas, libcublasLt)
 * reach it: through gpucloud's private export table (include/gpucloud_private.h). Over any other
 * libcuda the library refuses to start, saying why. Included once by each library's C file
 * (static state: each library holds its own reference to the table and its own handles). Define
 * GC_LIB_NAME (the name in messages) and include NVIDIA's cuBLAS header (cublasStatus_t) first. */
#ifndef GPUCLOUD_GUEST_SESSION_H
#define GPUCLOUD_GUEST_SESSION_H

#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"

static const struct gc_private_table *T;
static int t_ok;
static pthread_once_t t_once = PTHREAD_ONCE_INIT;

static void load_table(void) {
    T = gc_table_load(GC_LIB_NAME);
    t_ok = T != NULL;
}

/* session_ready is 1 once the session's table is reached (the first call tries). */
static int session_ready(void) {
    pthread_once(&t_once, load_table);
    return t_ok;
}

/* session_device gives the calling thread's device, making device 0's primary context current
 * where the thread has none (as the runtime does lazily): 0, or -1 when that fails. */
static int session_device(int *dev) {
    if (T->current_device(dev) == CUDA_SUCCESS) return 0;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) return -1;
    *dev = 0;
    return 0;
}

/* session_on_device makes sure the calling thread works on device (a handle's): with no current
 * context it makes that device's primary context current; 1 when the thread is current on another
 * device (the handle belongs to its own), -1 when no context could be made current. */
static int session_on_device(int device) {
    int dev;
    if (T->current_device(&dev) == CUDA_SUCCESS) return dev == device ? 0 : 1;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, device) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) return -1;
    return 0;
}

/* session_call sends one encoded request answered by BlasReply and returns its cuBLAS status;
 * no_reply sends it without waiting (a failure then surfaces at the next synchronising call). */
static cublasStatus_t session_call(uint16_t type, const uint8_t *b, size_t n, int no_reply, uint64_t *handle) {
    struct gw_blas_reply r = {0};
    CUresult rc = T->request(type, no_reply ? GW_FLAG_NO_REPLY : 0, b, n, GW_TYPE_BLAS_REPLY, &r);
    if (no_reply) return rc == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INTERNAL_ERROR;
    if (r.status != 0) {
        if (getenv("GPUCLOUD_DEBUG"))
            fprintf(stderr, "gpucloud: %s failed (status %d): %.*s\n", gw_type_name(type), r.status, (int)r.message_len,
                    r.message);
        return (cublasStatus_t)r.status;
    }
    if (rc != CUDA_SUCCESS) /* no BLAS status: the session itself failed */
        return rc == CUDA_ERROR_INVALID_CONTEXT ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_INTERNAL_ERROR;
    if (handle) *handle = r.handle;
    return CUBLAS_STATUS_SUCCESS;
}

/* A handle the worker holds: the library's handle object starts with one. Live handles are kept
 * in a list and looked up before they are read, so a destroyed or made-up one is refused
 * (CUBLAS_STATUS_NOT_INITIALIZED) instead of dereferenced. */
struct session_handle {
    uint32_t magic;
    int device;      /* the device current at creation */
    uint64_t server; /* the worker's id */
    struct session_handle *next;
};

static struct session_handle *live_handles;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

/* session_live reports whether h is a live handle with magic, and gives its server id and device. */
static int session_live(const void *h, uint32_t magic, uint64_t *server, int *device) {
    pthread_mutex_lock(&live_mu);
    struct session_handle *c = live_handles;
    while (c && (const void *)c != h) c = c->next;
    int ok = c && c->magic == magic;
    if (ok && server) *server = c->server;
    if (ok && device) *device = c->device;
    pthread_mutex_unlock(&live_mu);
    return ok;
}

/* session_new_handle makes a handle object of size bytes on the calling thread's device (device
 * 0's primary context made current where there is none): the worker's answer to the empty request
 * type (BlasCreate, LtCreate), then listed as live. */
static cublasStatus_t session_new_handle(size_t size, uint32_t magic, uint16_t type, void **out) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    if (!session_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    int dev;
    if (session_device(&dev) != 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    struct session_handle *h = calloc(1, size);
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    cublasStatus_t s = session_call(type, NULL, 0, 0, &h->server);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(h);
        return s;
    }
    h->magic = magic;
    h->device = dev;
    pthread_mutex_lock(&live_mu);
    h->next = live_handles;
    live_handles = h;
    pthread_mutex_unlock(&live_mu);
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* session_drop_handle unlists h and frees it after the worker destroys its handle (BlasDestroy). */
static cublasStatus_t session_drop_handle(void *h, uint32_t magic) {
    pthread_mutex_lock(&live_mu);
    struct session_handle **p = &live_handles;
    while (*p && (void *)*p != h) p = &(*p)->next;
    struct session_handle *c = *p && (*p)->magic == magic ? *p : NULL;
    if (c) *p = c->next;
    pthread_mutex_unlock(&live_mu);
    if (!c) return CUBLAS_STATUS_NOT_INITIALIZED;
    struct gw_blas_destroy m = {.handle = c->server};
    c->magic = 0;
    free(c);
    uint8_t b[16];
    gw_blas_destroy_encode(&m, b);
    return session_call(GW_TYPE_BLAS_DESTROY, b, gw_blas_destroy_size(&m), 0, NULL);
}

#endif

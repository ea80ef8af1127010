/* gpucloud's libcudnn.so.9: the session with gpuserverd, handles, versions and errors. See
 * README.md. */
#include "internal.h"
#include "../include/gpucloud_table.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cudnn_guest = 1;

const struct gc_private_table *gc_dnn_table;
static cudnnStatus_t t_status = CUDNN_STATUS_NOT_INITIALIZED;
static pthread_once_t t_once = PTHREAD_ONCE_INIT;

static void load_table(void) {
    gc_dnn_table = gc_table_load("libcudnn");
    if (gc_dnn_table) t_status = CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t gc_dnn_ready(void) {
    pthread_once(&t_once, load_table);
    if (t_status != CUDNN_STATUS_SUCCESS) return t_status;
    int dev;
    if (gc_dnn_table->current_device(&dev) == CUDA_SUCCESS) return CUDNN_STATUS_SUCCESS;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
        return CUDNN_STATUS_NOT_INITIALIZED;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- errors ---- */

static __thread char last_error[256];

cudnnStatus_t gc_dnn_fail(cudnnStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud libcudnn: %s\n", last_error);
    return st;
}

cudnnStatus_t gc_dnn_unsupported(const char *name, int *noticed) {
    if (!__atomic_exchange_n(noticed, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "gpucloud libcudnn: %s is not forwarded to gpuserverd: CUDNN_STATUS_NOT_SUPPORTED\n", name);
    return gc_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "%s is not supported by gpucloud's libcudnn", name);
}

cudnnStatus_t gc_dnn_call(uint16_t type, const uint8_t *b, size_t n, int no_reply, struct gc_dnn_result *out) {
    struct gw_dnn_reply r;
    memset(&r, 0, sizeof r);
    CUresult rc = gc_dnn_table->request(type, no_reply ? GW_FLAG_NO_REPLY : 0, b, n, GW_TYPE_DNN_REPLY, &r);
    if (no_reply) return rc == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS : gc_dnn_fail(CUDNN_STATUS_EXECUTION_FAILED, "%s: CUDA error %d", gw_type_name(type), rc);
    if (r.status != 0) return gc_dnn_fail((cudnnStatus_t)r.status, "%s failed in gpuserverd (status %d)", gw_type_name(type), r.status);
    if (rc != CUDA_SUCCESS) /* no cuDNN status: the session itself failed */
        return gc_dnn_fail(CUDNN_STATUS_INTERNAL_ERROR, "%s: CUDA error %d", gw_type_name(type), rc);
    if (out) {
        out->value = r.value;
        const uint64_t d[16] = {r.d0, r.d1, r.d2, r.d3, r.d4, r.d5, r.d6, r.d7, r.d8, r.d9, r.d10, r.d11, r.d12, r.d13, r.d14, r.d15};
        memcpy(out->data, d, sizeof d);
    }
    return CUDNN_STATUS_SUCCESS;
}

EXPORT void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (!message || max_size == 0) return;
    snprintf(message, max_size, "%s", last_error);
    last_error[0] = 0;
}

EXPORT const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch ((int)s) {
    case 0: return "CUDNN_STATUS_SUCCESS";
    case 1001: return "CUDNN_STATUS_NOT_INITIALIZED";
    case 2000: return "CUDNN_STATUS_BAD_PARAM";
    case 2002: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case 2004: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case 2005: return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
    case 2006: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case 2010: return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
    case 2012: return "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE";
    case 3000: return "CUDNN_STATUS_NOT_SUPPORTED";
    case 4000: return "CUDNN_STATUS_INTERNAL_ERROR";
    case 4003: return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case 5000: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    switch ((int)s / 1000) { /* cuDNN 9 groups its codes by thousands */
    case 1: return "CUDNN_STATUS_NOT_INITIALIZED (sub-code)";
    case 2: return "CUDNN_STATUS_BAD_PARAM (sub-code)";
    case 3: return "CUDNN_STATUS_NOT_SUPPORTED (sub-code)";
    case 4: return "CUDNN_STATUS_INTERNAL_ERROR (sub-code)";
    case 5: return "CUDNN_STATUS_EXECUTION_FAILED (sub-code)";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

/* ---- versions: the cuDNN API this library implements ---- */

EXPORT size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
EXPORT size_t cudnnGetCudartVersion(void) { return 13000; }

EXPORT cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CUDNN_STATUS_BAD_PARAM;
    switch ((int)type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* ---- handles ---- */

/* Live handles: a handle is looked up here before it is read, so a destroyed or made-up one is
 * refused instead of dereferenced. */
static struct cudnnContext *live;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static int is_live(cudnnHandle_t h) {
    pthread_mutex_lock(&live_mu);
    struct cudnnContext *c = live;
    while (c && c != h) c = c->next;
    pthread_mutex_unlock(&live_mu);
    return c != NULL && c->magic == HANDLE_MAGIC;
}

cudnnStatus_t gc_dnn_check(cudnnHandle_t h) {
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (!h || !is_live(h)) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "not a live cudnnHandle_t");
    int dev;
    if (gc_dnn_table->current_device(&dev) != CUDA_SUCCESS || dev != h->device)
        return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "the calling thread is not on the handle's device %d", h->device);
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    if (!handle) return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    int dev = 0;
    gc_dnn_table->current_device(&dev);
    struct cudnnContext *h = calloc(1, sizeof *h);
    if (!h) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    struct gw_dnn_create m = {0};
    uint8_t b[8];
    gw_dnn_create_encode(&m, b);
    struct gc_dnn_result r;
    s = gc_dnn_call(GW_TYPE_DNN_CREATE, b, gw_dnn_create_size(&m), 0, &r);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(h);
        return s;
    }
    h->magic = HANDLE_MAGIC;
    h->device = dev;
    h->server = r.value;
    pthread_mutex_lock(&live_mu);
    h->next = live;
    live = h;
    pthread_mutex_unlock(&live_mu);
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    cudnnStatus_t s = gc_dnn_check(h);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    pthread_mutex_lock(&live_mu);
    struct cudnnContext **p = &live;
    while (*p && *p != h) p = &(*p)->next;
    if (*p) *p = h->next;
    pthread_mutex_unlock(&live_mu);
    struct gw_dnn_destroy m = {.handle = h->server};
    h->magic = 0;
    free(h);
    GC_DNN_SEND(dnn_destroy, DNN_DESTROY, m, 0, NULL);
}

EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t stream) {
    cudnnStatus_t s = gc_dnn_check(h);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    /* PyTorch sets its cuDNN handle's stream before every operation (getCudnnHandle): sent
     * without waiting, and not at all when it is the handle's stream already. */
    if (h->stream_sent && h->stream == stream) return CUDNN_STATUS_SUCCESS;
    struct gw_dnn_set_stream m = {.handle = h->server, .stream = gc_dnn_table->stream_handle((CUstream)stream)};
    uint8_t b[32];
    gw_dnn_set_stream_encode(&m, b);
    s = gc_dnn_call(GW_TYPE_DNN_SET_STREAM, b, gw_dnn_set_stream_size(&m), 1, NULL);
    if (s == CUDNN_STATUS_SUCCESS) h->stream = stream, h->stream_sent = 1;
    return s;
}

EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *stream) {
    cudnnStatus_t s = gc_dnn_check(h);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (!stream) return CUDNN_STATUS_BAD_PARAM;
    *stream = h->stream;
    return CUDNN_STATUS_SUCCESS;
}

/* What gpucloud's libcusparse, libcufft and libcurand share: the words and host bytes of one call
 * of the generic path (backend/libcall.go), sent as the library's SparseCall, FftCall or RandCall,
 * and the one-time notice of a function that is not remoted. Each library's internal.h includes
 * this after cuda.h, wire_gen.h, gpucloud_private.h and gpucloud_table.h, and defines with
 * GC_LIBCALL_DEFINE its gc_lib_call and gc_lib_refused. */
#ifndef GPUCLOUD_LIBCALL_H
#define GPUCLOUD_LIBCALL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_WEAK __attribute__((weak, visibility("default")))
#define GC_LIB_OUTS 12
/* A call's host bytes are few (a plan's dimensions, two scalars): the guest sends at most this many
 * (the wire allows more), so a call's buffer lives on the caller's stack. */
#define GC_HOST_MAX 4096
#define GC_SCALAR_HOST_BIT (1ull << 63) /* backend.ScalarHostBit */

/* A call's host bytes: host inputs and host scalars, one after another. */
struct gc_host {
    uint8_t buf[GC_HOST_MAX];
    size_t len;
};

/* gc_host_add appends elems*unit bytes from p (none for NULL) and sets *w to their length. */
static inline int gc_host_add(struct gc_host *h, const void *p, int64_t elems, int64_t unit, uint64_t *w) {
    *w = 0;
    if (!p) return 0;
    if (elems < 0 || unit < 1 || elems > GC_HOST_MAX || (size_t)(elems * unit) > sizeof h->buf - h->len) return -1;
    memcpy(h->buf + h->len, p, (size_t)(elems * unit));
    h->len += (size_t)(elems * unit);
    *w = (uint64_t)(elems * unit);
    return 0;
}

/* gc_host_scalar sends n bytes of the scalar at p as host bytes. */
static inline int gc_host_scalar(struct gc_host *h, const void *p, size_t n, uint64_t *w) {
    if (!p || n == 0 || n > 16 || n > sizeof h->buf - h->len) return -1;
    memcpy(h->buf + h->len, p, n);
    h->len += n;
    *w = GC_SCALAR_HOST_BIT | n;
    return 0;
}

/* An output's value before the call, and storing its value after, width bytes wide. */
static inline uint64_t gc_out_prior(const void *p, int width) {
    uint64_t v = 0;
    if (p) memcpy(&v, p, (size_t)width);
    return v;
}
static inline void gc_out_put(void *p, int width, uint64_t v) {
    if (p) memcpy(p, &v, (size_t)width);
}
static inline uint64_t gc_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline uint64_t gc_f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* A call's host arrays too large for its host bytes (a sparse matrix a *Host function reads, the
 * solution it writes) travel through device memory: staged in before the call, the worker copies
 * them to host memory for NVIDIA's function and back after it, and the written ones (out) are
 * copied back here. The word is the staging's device address (0: NULL or empty). */
#define GC_STAGE_MAX 16
#define GC_STAGE_BAD (-1)
#define GC_STAGE_NOMEM (-2)
#define GC_STAGE_LIMIT (256ll << 20) /* backend.MaxStaged */
struct gc_stage {
    int n;
    struct {
        CUdeviceptr d;
        void *h;
        size_t len;
        int out;
    } a[GC_STAGE_MAX];
};

static inline int gc_stage_add(struct gc_stage *s, void *h, int64_t elems, int64_t unit, int out, uint64_t *w) {
    *w = 0;
    if (!h || elems == 0) return 0;
    if (elems < 0 || unit < 1 || elems > GC_STAGE_LIMIT / unit || s->n == GC_STAGE_MAX) return GC_STAGE_BAD;
    size_t len = (size_t)(elems * unit);
    CUdeviceptr d;
    if (cuMemAlloc(&d, len) != CUDA_SUCCESS) return GC_STAGE_NOMEM;
    if (cuMemcpyHtoD(d, h, len) != CUDA_SUCCESS) {
        cuMemFree(d);
        return GC_STAGE_BAD;
    }
    s->a[s->n].d = d;
    s->a[s->n].h = h;
    s->a[s->n].len = len;
    s->a[s->n].out = out;
    s->n++;
    *w = (uint64_t)d;
    return 0;
}

/* gc_stage_done copies the written arrays back (when copy is set) and frees the staging; -1 when a
 * copy failed. */
static inline int gc_stage_done(struct gc_stage *s, int copy) {
    int rc = 0;
    for (int i = 0; i < s->n; i++) {
        if (copy && s->a[i].out && cuMemcpyDtoH(s->a[i].h, s->a[i].d, s->a[i].len) != CUDA_SUCCESS) rc = -1;
        cuMemFree(s->a[i].d);
    }
    s->n = 0;
    return rc;
}

/* GC_LIBCALL_DEFINE defines, for the library named name (say "libcufft") whose wire messages are
 * lower_call/lower_reply (fft: gw_fft_call, GW_TYPE_FFT_CALL ...):
 *   int gc_lib_call(uint32_t fn, const uint64_t *w, int n, const struct gc_host *hb, int async, uint64_t *out)
 *     sends one call and returns the library's status (out: the outputs); no_session is the status
 *     when there is no session with gpuserverd, internal when the session failed under the call;
 *   int gc_lib_refused(const char *fn, atomic_int *told, int status): the one-time notice. */
#define GC_LIBCALL_DEFINE(name, lower, UPPER, no_session, internal)                                          \
    static const struct gc_private_table *gc_lib_table;                                                     \
    static pthread_once_t gc_lib_once = PTHREAD_ONCE_INIT;                                                  \
    static void gc_lib_load(void) { gc_lib_table = gc_table_load(name); }                                   \
    int gc_lib_ready(void) {                                                                                \
        pthread_once(&gc_lib_once, gc_lib_load);                                                            \
        if (!gc_lib_table) return no_session;                                                               \
        int dev;                                                                                            \
        if (gc_lib_table->current_device(&dev) == CUDA_SUCCESS) return 0;                                   \
        CUcontext c; /* device 0's primary context, as the runtime makes one lazily */                     \
        if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)          \
            return no_session;                                                                              \
        return 0;                                                                                           \
    }                                                                                                       \
    uint64_t gc_lib_stream(void *s) { return gc_lib_ready() == 0 ? gc_lib_table->stream_handle((CUstream)s) : 0; } \
    int gc_lib_call(uint32_t fn, const uint64_t *w, int n, const struct gc_host *hb, int async, uint64_t *out) { \
        int st = gc_lib_ready();                                                                            \
        if (st != 0) return st;                                                                             \
        struct gw_##lower##_call m = {.fn = fn, .args = w, .args_len = (uint32_t)(8 * n),                   \
                                      .host = hb->buf, .host_len = (uint32_t)hb->len};                      \
        size_t sz = gw_##lower##_call_size(&m);                                                             \
        uint8_t *b = malloc(sz);                                                                            \
        if (!b) return internal;                                                                            \
        gw_##lower##_call_encode(&m, b);                                                                    \
        struct gw_##lower##_reply r;                                                                        \
        memset(&r, 0, sizeof r);                                                                            \
        CUresult rc = gc_lib_table->request(GW_TYPE_##UPPER##_CALL, async ? GW_FLAG_NO_REPLY : 0, b, sz,    \
                                            GW_TYPE_##UPPER##_REPLY, &r);                                   \
        free(b);                                                                                            \
        if (async) return rc == CUDA_SUCCESS ? 0 : internal;                                                \
        if (r.status != 0) {                                                                                \
            if (getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud %s: call %u: status %d\n", name, fn, r.status); \
            return r.status;                                                                                \
        }                                                                                                   \
        if (rc != CUDA_SUCCESS) return internal;                                                            \
        const uint64_t o[GC_LIB_OUTS] = {r.o0, r.o1, r.o2, r.o3, r.o4, r.o5, r.o6, r.o7, r.o8, r.o9, r.o10, r.o11}; \
        memcpy(out, o, sizeof o);                                                                           \
        return 0;                                                                                           \
    }                                                                                                       \
    int gc_lib_refused(const char *fn, atomic_int *told, int status) {                                      \
        if (!atomic_exchange(told, 1))                                                                      \
            fprintf(stderr, "gpucloud %s: %s is not remoted to gpuserverd (status %d)\n", name, fn, status);   \
        return status;                                                                                      \
    }

/* What a library's internal.h declares (the definitions come from GC_LIBCALL_DEFINE). */
int gc_lib_ready(void);
uint64_t gc_lib_stream(void *s);
int gc_lib_call(uint32_t fn, const uint64_t *w, int n, const struct gc_host *hb, int async, uint64_t *out);
int gc_lib_refused(const char *fn, atomic_int *told, int status);

/* GC_NOT_REMOTED_AS exports name answering status once on stderr (the caller's arguments are
 * ignored, which the x86-64 calling convention allows). */
#define GC_NOT_REMOTED_AS(name, status)                                                                     \
    GC_WEAK int name(void) {                                                                                \
        static atomic_int told;                                                                             \
        return gc_lib_refused(#name, &told, status);                                                        \
    }

#endif

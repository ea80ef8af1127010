/* Internals of the guest library's driver API (driver/): the local state that stands in for driver
 * objects (contexts, modules, functions) and the calls that go through the transport below. */
#ifndef GPUCLOUD_GUEST_H
#define GPUCLOUD_GUEST_H

#include "transport/transport.h"
#include "include/gpucloud_private.h"

#define EXPORT __attribute__((visibility("default")))
/* Exports name as another name for target (same signature). */
#define ALIAS(name, target) EXPORT __typeof__(target) name __attribute__((alias(#target)))

struct CUctx_st {
    uint32_t magic;
    int device;
    int primary;
};
#define GC_CTX_MAGIC 0x67637478u

struct CUmod_st {
    uint64_t handle;
    /* Its managed variables the program has asked for, each adopted by coherence (api_module.c). */
    struct gc_managed_var {
        CUdeviceptr ptr;
        size_t bytes;
    } *managed;
    int nmanaged;
};

/* A function and its parameter layout, fetched from the server on first launch. */
struct CUfunc_st {
    uint64_t handle;
    int layout_loaded;
    uint32_t nparams;
    uint32_t *offsets, *sizes;
};

struct CUlib_st {
    struct CUmod_st *mod;
};

/* A call on the current context's device: sends the encoded request and, unless it goes without a
 * reply, decodes the reply (of type want) into *reply and returns its result. Only the reply's
 * fixed fields may be read afterwards: its strings and bytes point into a buffer the next call
 * reuses. */
CUresult gc_request(uint16_t type, uint16_t flags, const uint8_t *head, size_t n, uint16_t want, void *reply);
/* The same with a tail sent from where it lies (module images). */
CUresult gc_request_tail(uint16_t type, const uint8_t *head, size_t n, const void *tail, size_t tail_n,
                         uint16_t want, void *reply);
/* A call needing no context (driver and device queries). */
CUresult gc_request_global(uint16_t type, const uint8_t *head, size_t n, uint16_t want, void *reply);
/* A call answered by HandleReply: stores the handle. */
CUresult gc_handle_call(uint16_t type, const uint8_t *b, size_t n, uint64_t *out);
/* A call answered by Status. */
CUresult gc_call_status(uint16_t type, uint16_t flags, const uint8_t *head, size_t n);
/* gc_call_status on device dev of the session (an event's own), whatever the thread's current one. */
CUresult gc_call_status_on(int dev, uint16_t type, uint16_t flags, const uint8_t *head, size_t n);

/* Current context of the calling thread. */
CUresult gc_current_device(int *dev);
int gc_valid_context(CUcontext c);

/* Device allocations, to tell device from host pointers in cuMemcpy. */
void gc_track_alloc(CUdeviceptr p, size_t n);
void gc_untrack_alloc(CUdeviceptr p);
int gc_find_alloc(CUdeviceptr p, CUdeviceptr *base, size_t *size);
int gc_graph_range(CUdeviceptr p, CUdeviceptr *base, size_t *size); /* allocation nodes' ranges */

/* Streams and events travel as server handles; CUstream 0x1 and 0x2 are the special default streams. */
uint64_t gc_stream_handle(CUstream s);
int gc_stream_is_per_thread(CUstream s); /* CU_STREAM_PER_THREAD */
CUresult gc_arena_device_base(uint64_t *base); /* driver/hostreg.c */
int gc_arena_device_addr(const void *p, size_t n, uint64_t *addr);
int gc_is_capturing(CUstream s);              /* driver/graph.c */
int gc_managed_free(CUdeviceptr p);          /* driver/managed.c: 1 if p was managed memory */
/* Drops the stream attributes kept for a destroyed stream (driver/streamattr.c). */
void gc_stream_forget_hints(CUstream s);
CUstream gc_stream_ptr(uint64_t h);

/* Runs the runtime's context-local-storage destructors for a context that is going (export_tables.c). */
void gc_cls_context_gone(CUcontext ctx);

/* Whether fn is a generated stub that only answers CUDA_ERROR_NOT_SUPPORTED (api_gen.c). */
int gc_gen_refused(const void *fn);

/* Packs a launch's parameters (params or extra, as cuLaunchKernel takes them) into packed, or
 * points *pbuf at extra's buffer; *plen is their length. gc.mu held (api_module.c). */
CUresult gc_pack_params_locked(CUfunction f, void **params, void **extra, uint8_t packed[32768], const void **pbuf,
                               size_t *plen);
/* Gives plain pinned memory named in a launch's parameters its device side (driver/coh_pinned.c),
 * before the hand-over; gc.mu not held (api_module.c). */
CUresult gc_promote_params(CUfunction f, void **params, void **extra);
/* A call whose reply carries data: encodes nothing itself; sends head (and tail) and decodes the
 * reply of type want into reply while gc.mu is held, then runs keep(reply, arg) to copy out what
 * the reply points to before the buffer is reused (driver/families.c). */
CUresult gc_request_keep(uint16_t type, uint16_t flags, const uint8_t *head, size_t n, const void *tail, size_t tail_n,
                         uint16_t want, void *reply, CUresult (*keep)(void *reply, void *arg), void *arg);

/* Whether s is capturing, so that a copy with host memory is refused (and the capture
 * invalidated, as the driver does): a graph cannot replay the guest's memory (driver/graph.c). */
int gc_capture_refuses(CUstream s);
/* A 2-D copy with an array side (driver/array.c). */
CUresult gc_copy2d_arrays(const CUDA_MEMCPY2D *c, CUstream s, int async);

/* gpucloud's own export table, for gpucloud's guest libraries (private_table.c). */
extern const struct gc_private_table gc_private_table;

/* Encode a message with the generated encoder into a stack buffer and call. */
#define GC_ENCODE(lower, msg, buf)                                                     \
    uint8_t buf[2200];                                                                 \
    size_t buf##_n = gw_##lower##_size(&(msg));                                        \
    if (buf##_n > sizeof buf) return CUDA_ERROR_INVALID_VALUE;                         \
    gw_##lower##_encode(&(msg), buf)

#endif

/* What the files of gpucloud's libcudnn.so.9 share (session.c, graph.c, legacy.c,
 * unsupported.c). */
#ifndef GPUCLOUD_CUDNN_INTERNAL_H
#define GPUCLOUD_CUDNN_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <cudnn.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"

#define EXPORT __attribute__((visibility("default")))

extern const struct gc_private_table *gc_dnn_table;

/* gc_dnn_ready loads the guest libcuda's private table once and makes sure the calling thread has
 * a context (device 0's primary, as the runtime does lazily); CUDNN_STATUS_SUCCESS or why not. */
cudnnStatus_t gc_dnn_ready(void);

/* The reply's fixed fields of one cuDNN request. */
struct gc_dnn_result {
    uint64_t value;
    uint64_t data[16];
};

/* gc_dnn_call sends an encoded cuDNN request and returns cuDNN's status (out may be NULL);
 * no_reply sends it without waiting: its failure surfaces at the next synchronising call. */
cudnnStatus_t gc_dnn_call(uint16_t type, const uint8_t *b, size_t n, int no_reply, struct gc_dnn_result *out);

/* gc_dnn_fail records msg as the calling thread's last error (cudnnGetLastErrorString) and
 * returns st. */
cudnnStatus_t gc_dnn_fail(cudnnStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define HANDLE_MAGIC 0x67636468u

struct cudnnContext {
    uint32_t magic;
    int device;      /* the device current at cudnnCreate */
    uint64_t server; /* the worker's id of the handle */
    cudaStream_t stream;
    int stream_sent; /* stream was sent to the worker's handle */
    struct cudnnContext *next;
};

/* gc_dnn_check admits a call on h: the library ready, h live, the thread on its device. */
cudnnStatus_t gc_dnn_check(cudnnHandle_t h);

/* The encoded size of a message struct, and encoding it into a buffer of that size. */
#define GC_DNN_SEND(lower, TYPE, msg, no_reply, out)                                                \
    do {                                                                                            \
        size_t n_ = gw_##lower##_size(&(msg));                                                      \
        uint8_t *buf_ = malloc(n_);                                                                 \
        if (!buf_) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;                       \
        gw_##lower##_encode(&(msg), buf_);                                                          \
        cudnnStatus_t st_ = gc_dnn_call(GW_TYPE_##TYPE, buf_, n_, (no_reply), (out));               \
        free(buf_);                                                                                 \
        return st_;                                                                                 \
    } while (0)

/* By-value scalars (byvalue.c). cuDNN reads a tensor marked CUDNN_ATTR_TENSOR_IS_BY_VALUE (an
 * attention's scale) from a host pointer in the variant pack, which the worker cannot read in this
 * process; so a pack naming one is sent with the value itself (backend.DnnTypeHostValues). */
#define GC_DNN_TYPE_HOST_VALUES 0x6763 /* backend.DnnTypeHostValues */
struct gc_bv {
    int64_t uid;                   /* a tensor's UNIQUE_ID, IS_BY_VALUE and DATA_TYPE as set */
    int has_uid, by_value, dtype;
    void **ptrs;                   /* a variant pack's DATA_POINTERS and UNIQUE_IDS as set */
    int64_t nptrs, *uids, nuids;
    int substituted;               /* its pointers went as values: reads answer from ptrs */
};
/* gc_bv_note records what a SetAttribute on a descriptor of kind says about by-value tensors. */
void gc_bv_note(struct gc_bv *bv, uint32_t kind, int name, int type, int64_t count, const void *elems);
/* gc_bv_finalized registers a finalized by-value tensor's unique id. */
void gc_bv_finalized(struct gc_bv *bv, uint32_t kind);
/* gc_bv_pack_values: for a variant pack naming a by-value tensor, its DATA_POINTERS as
 * GC_DNN_TYPE_HOST_VALUES elements (malloc'd, *count of 16 bytes each); NULL when none is. */
uint8_t *gc_bv_pack_values(struct gc_bv *bv, uint32_t kind, int64_t *count);
void gc_bv_free(struct gc_bv *bv);
#define GC_ATTR_VARIANT_PACK_UNIQUE_IDS 1000
#define GC_ATTR_VARIANT_PACK_DATA_POINTERS 1001

/* A call this library does not forward: CUDNN_STATUS_NOT_SUPPORTED, with a notice on stderr the
 * first time, naming it. */
cudnnStatus_t gc_dnn_unsupported(const char *name, int *noticed);
#define UNSUPPORTED(name)                                                                           \
    do {                                                                                            \
        static int noticed_;                                                                        \
        return gc_dnn_unsupported(name, &noticed_);                                                 \
    } while (0)

#endif

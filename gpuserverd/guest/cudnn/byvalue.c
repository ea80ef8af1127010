/* gpucloud's libcudnn.so.9: host scalars passed by value in a variant pack (internal.h).
 *
 * A variant pack names tensors by unique id only, and ids are a graph's, not the process's: the
 * cuDNN frontend numbers the tensors it adds itself (a causal mask's -inf, an attention's scale)
 * from 1 up, past the ids the caller set, so PyTorch's attention forward gives a by-value scalar
 * the id its backward graph gives dO, a device tensor. So an id is kept once any tensor with it
 * was finalized by value (with the largest such value's size), and an element of a pack is sent
 * as a value only when its id is so kept and its pointer is no device memory of this process
 * (the guest libcuda's allocation table, no round trip): a device address is never read here,
 * and a host address is never sent to the worker, whose cuDNN would read it in its own process
 * (the SIGSEGV of the 17:27 H100 run: the forward graph's -inf scalar after the backward graph's
 * dO had taken its id off the earlier table). */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    KIND_VARIANT_PACK = 16, KIND_TENSOR = 17,         /* cudnnBackendDescriptorType_t */
    ATTR_TENSOR_DATA_TYPE = 901, ATTR_TENSOR_UNIQUE_ID = 906, ATTR_TENSOR_IS_BY_VALUE = 908,
    ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    T_BOOLEAN = 2, T_INT64 = 3, T_VOID_PTR = 6, T_DATA_TYPE = 1, /* cudnnBackendAttributeType_t */
    MAX_BY_VALUE = 4096,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
struct by_value_id {
    int64_t uid;
    int size; /* the largest by-value element with this id, in bytes */
};
static struct by_value_id by_value[MAX_BY_VALUE];
static int n_by_value;

/* value_size is the bytes of one element of a cudnnDataType_t. */
static int value_size(int dtype) {
    switch (dtype) {
    case 1: case 10: return 8;                  /* DOUBLE, INT64 */
    case 2: case 9: return 2;                   /* HALF, BFLOAT16 */
    case 3: case 6: case 11: case 12: case 13: case 14: case 15: return 1; /* 8-bit types, BOOLEAN */
    }
    return 4;                                   /* FLOAT, INT32 and the rest */
}

void gc_bv_note(struct gc_bv *bv, uint32_t kind, int name, int type, int64_t count, const void *elems) {
    if (count < 1 || !elems) return;
    if (kind == KIND_TENSOR) {
        if (name == ATTR_TENSOR_UNIQUE_ID && type == T_INT64) bv->uid = *(const int64_t *)elems, bv->has_uid = 1;
        if (name == ATTR_TENSOR_IS_BY_VALUE && type == T_BOOLEAN) bv->by_value = *(const uint8_t *)elems != 0;
        if (name == ATTR_TENSOR_DATA_TYPE && type == T_DATA_TYPE) bv->dtype = *(const int32_t *)elems;
        return;
    }
    if (kind != KIND_VARIANT_PACK) return;
    if (name == GC_ATTR_VARIANT_PACK_DATA_POINTERS && type == T_VOID_PTR) {
        void **p = malloc((size_t)count * sizeof *p);
        if (!p) return;
        memcpy(p, elems, (size_t)count * sizeof *p);
        free(bv->ptrs);
        bv->ptrs = p, bv->nptrs = count;
    } else if (name == ATTR_VARIANT_PACK_UNIQUE_IDS && type == T_INT64) {
        int64_t *u = malloc((size_t)count * sizeof *u);
        if (!u) return;
        memcpy(u, elems, (size_t)count * sizeof *u);
        free(bv->uids);
        bv->uids = u, bv->nuids = count;
    }
}

void gc_bv_finalized(struct gc_bv *bv, uint32_t kind) {
    if (kind != KIND_TENSOR || !bv->has_uid) return;
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < n_by_value && by_value[i].uid != bv->uid) i++;
    if (bv->by_value) {
        int size = value_size(bv->dtype);
        if (i == n_by_value && n_by_value < MAX_BY_VALUE) by_value[n_by_value++] = (struct by_value_id){bv->uid, size};
        else if (i < n_by_value && by_value[i].size < size) by_value[i].size = size;
    }
    pthread_mutex_unlock(&mu);
}

static int size_of_uid(int64_t uid) {
    int size = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_by_value; i++)
        if (by_value[i].uid == uid) size = by_value[i].size;
    pthread_mutex_unlock(&mu);
    return size;
}

/* host_address: p is not in a device allocation this process made (so it is the caller's memory,
 * which cuDNN would read on the host). */
static int host_address(const void *p) {
    unsigned type = 0;
    if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
        return 0; /* not known to be host memory: leave it as it is */
    return type != CU_MEMORYTYPE_DEVICE;
}

uint8_t *gc_bv_pack_values(struct gc_bv *bv, uint32_t kind, int64_t *count) {
    if (kind != KIND_VARIANT_PACK || !bv->ptrs || bv->nptrs != bv->nuids) return NULL;
    uint8_t *e = calloc((size_t)bv->nptrs, 16);
    if (!e) return NULL;
    int any = 0;
    for (int64_t i = 0; i < bv->nptrs; i++) {
        uint64_t len = (uint64_t)size_of_uid(bv->uids[i]), word = 0;
        if (len && bv->ptrs[i] && host_address(bv->ptrs[i])) {
            memcpy(&word, bv->ptrs[i], len); /* the scalar, read here where it lives */
            any = 1;
        } else {
            len = 0, word = (uint64_t)(uintptr_t)bv->ptrs[i];
        }
        memcpy(e + i * 16, &len, 8);
        memcpy(e + i * 16 + 8, &word, 8);
    }
    if (!any) {
        free(e);
        return NULL;
    }
    *count = bv->nptrs;
    bv->substituted = 1;
    return e;
}

void gc_bv_free(struct gc_bv *bv) {
    free(bv->ptrs);
    free(bv->uids);
    memset(bv, 0, sizeof *bv);
}

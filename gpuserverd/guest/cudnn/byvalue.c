/* gpucloud's libcudnn.so.9: host scalars passed by value in a variant pack (internal.h). The
 * unique ids of finalized by-value tensors are kept process-wide: a variant pack names tensors by
 * id only, and PyTorch's graphs give their by-value scalars ids no device tensor shares. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    KIND_VARIANT_PACK = 16, KIND_TENSOR = 17,         /* cudnnBackendDescriptorType_t */
    ATTR_TENSOR_DATA_TYPE = 901, ATTR_TENSOR_UNIQUE_ID = 906, ATTR_TENSOR_IS_BY_VALUE = 908,
    ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    T_BOOLEAN = 2, T_INT64 = 3, T_VOID_PTR = 6, T_DATA_TYPE = 1, /* cudnnBackendAttributeType_t */
    MAX_BY_VALUE = 256,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { int64_t uid; int size; } by_value[MAX_BY_VALUE];
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
        if (i == n_by_value && n_by_value < MAX_BY_VALUE) n_by_value++;
        if (i < n_by_value) by_value[i].uid = bv->uid, by_value[i].size = value_size(bv->dtype);
    } else if (i < n_by_value) { /* the id now names a device tensor */
        by_value[i] = by_value[--n_by_value];
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

uint8_t *gc_bv_pack_values(struct gc_bv *bv, uint32_t kind, int64_t *count) {
    if (kind != KIND_VARIANT_PACK || !bv->ptrs || bv->nptrs != bv->nuids) return NULL;
    uint8_t *e = calloc((size_t)bv->nptrs, 16);
    if (!e) return NULL;
    int any = 0;
    for (int64_t i = 0; i < bv->nptrs; i++) {
        uint64_t len = (uint64_t)size_of_uid(bv->uids[i]), word = 0;
        if (len && bv->ptrs[i]) {
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

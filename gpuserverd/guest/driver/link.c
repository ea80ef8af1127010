/* JIT linking, done in the worker: inputs are sent as they are added (a file is read here), the
 * linked image comes back at cuLinkComplete and stays the link's until cuLinkDestroy. JIT options
 * are not forwarded: the worker links with the driver's defaults, and log buffers stay untouched. */
#include "families.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct CUlinkState_st {
    uint64_t handle;
    void *image;
    size_t size;
};

EXPORT CUresult cuLinkCreate_v2(unsigned n, CUjit_option *opts, void **vals, CUlinkState *state) {
    (void)n, (void)opts, (void)vals;
    if (!state) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct CUlinkState_st *l = calloc(1, sizeof *l);
    if (!l) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_LINK_CREATE, NULL, 0, &h);
    if (rc != CUDA_SUCCESS) {
        free(l);
        return GC_T(rc);
    }
    l->handle = h;
    *state = l;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuLinkAddData_v2(CUlinkState l, CUjitInputType type, void *data, size_t size, const char *name,
                                 unsigned n, CUjit_option *opts, void **vals) {
    (void)n, (void)opts, (void)vals;
    if (!l || !data || size == 0 || size > 67100000) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_link_add_data m = {.link = l->handle, .input_type = type, .name = name ? name : "",
                                 .name_len = name ? (uint32_t)strnlen(name, 256) : 0, .data = data,
                                 .data_len = (uint32_t)size};
    uint8_t head[300];
    uint8_t *end = gw_link_add_data_encode_head(&m, head);
    struct gw_status st;
    return GC_T(gc_request_keep(GW_TYPE_LINK_ADD_DATA, 0, head, end - head, data, size, GW_TYPE_STATUS, &st, NULL, NULL));
}

EXPORT CUresult cuLinkAddFile_v2(CUlinkState l, CUjitInputType type, const char *path, unsigned n, CUjit_option *opts,
                                 void **vals) {
    if (!path) return GC_T(CUDA_ERROR_INVALID_VALUE);
    FILE *f = fopen(path, "rb");
    if (!f) return GC_T(CUDA_ERROR_FILE_NOT_FOUND);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            char *nb = cap < 67100000 ? realloc(buf, cap = cap ? 2 * cap : 1 << 16) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                return GC_T(CUDA_ERROR_INVALID_VALUE);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0) break;
        len += got;
    }
    fclose(f);
    const char *base = strrchr(path, '/');
    CUresult rc = cuLinkAddData_v2(l, type, buf, len, base ? base + 1 : path, n, opts, vals);
    free(buf);
    return rc;
}

static CUresult keep_image(void *reply, void *arg) {
    const struct gw_link_complete_reply *r = reply;
    struct CUlinkState_st *l = arg;
    void *img = malloc(r->image_len ? r->image_len : 1);
    if (!img) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(img, r->image, r->image_len);
    free(l->image);
    l->image = img, l->size = r->image_len;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLinkComplete(CUlinkState l, void **cubin, size_t *size) {
    if (!l || !cubin || !size) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_link_complete m = {.link = l->handle};
    GC_ENCODE(link_complete, m, b);
    struct gw_link_complete_reply r;
    CUresult rc = gc_request_keep(GW_TYPE_LINK_COMPLETE, 0, b, b_n, NULL, 0, GW_TYPE_LINK_COMPLETE_REPLY, &r, keep_image, l);
    if (rc == CUDA_SUCCESS) *cubin = l->image, *size = l->size;
    return GC_T(rc);
}

EXPORT CUresult cuLinkDestroy(CUlinkState l) {
    if (!l) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_link_destroy m = {.link = l->handle};
    GC_ENCODE(link_destroy, m, b);
    CUresult rc = gc_call_status(GW_TYPE_LINK_DESTROY, 0, b, b_n);
    free(l->image);
    free(l);
    return GC_T(rc);
}

/* The first forms take the same arguments. */
ALIAS(cuLinkCreate, cuLinkCreate_v2);
ALIAS(cuLinkAddData, cuLinkAddData_v2);
ALIAS(cuLinkAddFile, cuLinkAddFile_v2);

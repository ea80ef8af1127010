/* gpucloud's libcudnn.so.9: cuDNN's backend (graph) API, which the cuDNN frontend and PyTorch
 * build convolutions and attention with. A descriptor here is the worker's id of NVIDIA's real
 * descriptor; attributes travel as elements of their cudnnBackendAttributeType_t, descriptors
 * and handles as ids, device addresses as they are. See README.md. */
#include "internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DESC_MAGIC 0x67636462u
#define MAX_ELEMS 65536 /* backend.DnnMaxElems; and a message's elems field holds 64 KiB */

/* A variant pack is kept here (local): its attributes travel with cudnnBackendExecute, whole, in
 * one DnnExecutePack sent without waiting, so PyTorch's per-operation packs (create, three
 * attributes, finalize, destroy: six round trips per convolution or attention) cost none. */
#define KIND_VARIANT_PACK 16
#define PACK_MAX_ATTRS 16 /* worker.dnnPackMaxAttrs */
struct local_attr {
    uint32_t name, type, count;
    uint8_t *elems; /* wire form */
    size_t len;
};

struct gc_desc {
    uint32_t magic;
    uint32_t kind;
    uint64_t id; /* the worker's; 0 for a local pack */
    struct gc_bv bv;
    int local, finalized;
    struct local_attr attrs[PACK_MAX_ATTRS];
    int nattrs;
};

static void local_free(struct gc_desc *g) {
    for (int i = 0; i < g->nattrs; i++) free(g->attrs[i].elems);
    g->nattrs = 0;
}

static struct gc_desc *desc_of(cudnnBackendDescriptor_t d) {
    struct gc_desc *g = d;
    return g && g->magic == DESC_MAGIC ? g : NULL;
}

/* elem_size is the size of one element of t in the caller's array, and on the wire (ids and
 * pointers as u64); 0 for a type cuDNN 9 does not have. */
static size_t elem_size(int t, size_t *host) {
    switch (t) {
    case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_BACKEND_DESCRIPTOR: case CUDNN_TYPE_VOID_PTR:
        *host = sizeof(void *);
        return 8;
    case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE:
        *host = 8;
        return 8;
    case CUDNN_TYPE_BOOLEAN: case CUDNN_TYPE_CHAR:
        *host = 1;
        return 1;
    case CUDNN_TYPE_FRACTION:
        *host = sizeof(cudnnFraction_t);
        return 16;
    }
    if (t >= 0 && t <= CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE) {
        *host = 4; /* float, int32_t and the enumerations */
        return 4;
    }
    return 0;
}

EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *descriptor) {
    if (!descriptor) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    struct gc_desc *g = calloc(1, sizeof *g);
    if (!g) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    if (type == KIND_VARIANT_PACK) {
        g->magic = DESC_MAGIC, g->kind = (uint32_t)type, g->local = 1;
        *descriptor = g;
        return CUDNN_STATUS_SUCCESS;
    }
    struct gw_dnn_desc_create m = {.kind = (uint32_t)type};
    uint8_t b[8];
    gw_dnn_desc_create_encode(&m, b);
    struct gc_dnn_result r;
    s = gc_dnn_call(GW_TYPE_DNN_DESC_CREATE, b, gw_dnn_desc_create_size(&m), 0, &r);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(g);
        return s;
    }
    g->magic = DESC_MAGIC;
    g->kind = (uint32_t)type;
    g->id = r.value;
    *descriptor = g;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
    struct gc_desc *g = desc_of(descriptor);
    if (!g) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor: not a live descriptor");
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    struct gw_dnn_desc_destroy m = {.desc = g->id};
    int local = g->local;
    g->magic = 0;
    gc_bv_free(&g->bv);
    local_free(g);
    free(g);
    if (local) return CUDNN_STATUS_SUCCESS;
    uint8_t b[16];
    gw_dnn_desc_destroy_encode(&m, b);
    return gc_dnn_call(GW_TYPE_DNN_DESC_DESTROY, b, gw_dnn_desc_destroy_size(&m), 0, NULL);
}

/* put_id writes the worker id of a descriptor or handle element; 0 for one that is not live. */
static int put_id(int type, const void *elem, uint8_t *out) {
    uint64_t id;
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        struct gc_desc *g = desc_of(*(cudnnBackendDescriptor_t const *)elem);
        if (!g || g->local) return 0; /* no attribute takes a variant pack */
        id = g->id;
    } else {
        cudnnHandle_t h = *(cudnnHandle_t const *)elem;
        if (gc_dnn_check(h) != CUDNN_STATUS_SUCCESS) return 0;
        id = h->server;
    }
    memcpy(out, &id, 8);
    return 1;
}

/* send_attr sends count elements already in their wire form (e, len bytes). */
static cudnnStatus_t send_attr(struct gc_desc *g, uint32_t name, uint32_t type, int64_t count, uint8_t *e, size_t len) {
    struct gw_dnn_set_attribute m = {.desc = g->id, .name = name, .kind = type,
                                     .count = (uint32_t)count, .elems = e, .elems_len = (uint32_t)len};
    size_t n = gw_dnn_set_attribute_size(&m);
    uint8_t *buf = malloc(n);
    if (!buf) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    gw_dnn_set_attribute_encode(&m, buf);
    cudnnStatus_t s = gc_dnn_call(GW_TYPE_DNN_SET_ATTRIBUTE, buf, n, 0, NULL);
    free(buf);
    return s;
}

/* local_set keeps a local pack's attribute (its wire elements e, taken over), in place of one of
 * the same name; a finalized pack takes no more, as cuDNN's. */
static cudnnStatus_t local_set(struct gc_desc *g, uint32_t name, uint32_t type, uint32_t count, uint8_t *e, size_t len) {
    if (g->finalized) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: the variant pack is finalized");
    int i = 0;
    while (i < g->nattrs && g->attrs[i].name != name) i++;
    if (i == PACK_MAX_ATTRS)
        return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: more than %d variant pack attributes", PACK_MAX_ATTRS);
    if (i == g->nattrs) g->nattrs++;
    else free(g->attrs[i].elems);
    g->attrs[i] = (struct local_attr){name, type, count, e, len};
    return CUDNN_STATUS_SUCCESS;
}

static const struct local_attr *local_get(const struct gc_desc *g, uint32_t name) {
    for (int i = 0; i < g->nattrs; i++)
        if (g->attrs[i].name == name) return &g->attrs[i];
    return NULL;
}

EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                              cudnnBackendAttributeType_t type, int64_t count, const void *elems) {
    struct gc_desc *g = desc_of(descriptor);
    if (!g) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: not a live descriptor");
    size_t host, wire = elem_size((int)type, &host);
    if (!wire) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "cudnnBackendSetAttribute: attribute type %d", (int)type);
    if (count < 0 || count > MAX_ELEMS || (int64_t)wire * count > MAX_ELEMS)
        return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: %lld elements", (long long)count);
    if (count > 0 && !elems) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    uint8_t *e = malloc((size_t)count * wire + 1);
    if (!e) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    const uint8_t *src = elems;
    for (int64_t i = 0; i < count; i++) {
        const uint8_t *el = src + (size_t)i * host;
        uint8_t *out = e + (size_t)i * wire;
        if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR || type == CUDNN_TYPE_HANDLE) {
            if (!put_id((int)type, el, out)) {
                free(e);
                return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: element %lld is not a live %s",
                                   (long long)i, type == CUDNN_TYPE_HANDLE ? "handle" : "descriptor");
            }
        } else if (type == CUDNN_TYPE_VOID_PTR) {
            uint64_t p = (uint64_t)(uintptr_t) * (void *const *)el;
            memcpy(out, &p, 8);
        } else {
            memcpy(out, el, wire);
        }
    }
    if (g->local) {
        s = local_set(g, (uint32_t)name, (uint32_t)type, (uint32_t)count, e, (size_t)count * wire);
        if (s != CUDNN_STATUS_SUCCESS) free(e);
    } else {
        s = send_attr(g, (uint32_t)name, (uint32_t)type, count, e, (size_t)count * wire);
        free(e);
    }
    if (s == CUDNN_STATUS_SUCCESS) gc_bv_note(&g->bv, g->kind, (int)name, (int)type, count, elems);
    return s;
}

/* get_once asks for the attribute's elements from offset on; the reply holds 128 bytes of them. */
static cudnnStatus_t get_once(struct gc_desc *g, cudnnBackendAttributeName_t name, int type, uint32_t requested,
                              uint32_t offset, const uint8_t *ids, struct gc_dnn_result *r) {
    struct gw_dnn_get_attribute m = {.desc = g->id, .name = (uint32_t)name, .kind = (uint32_t)type,
                                     .requested = requested, .offset = offset, .elems = ids,
                                     .elems_len = ids ? requested * 8 : 0};
    size_t n = gw_dnn_get_attribute_size(&m);
    uint8_t *buf = malloc(n);
    if (!buf) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    gw_dnn_get_attribute_encode(&m, buf);
    cudnnStatus_t s = gc_dnn_call(GW_TYPE_DNN_GET_ATTRIBUTE, buf, n, 0, r);
    free(buf);
    return s;
}

EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
                                              cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                              void *elems) {
    struct gc_desc *g = desc_of(descriptor);
    if (!g) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: not a live descriptor");
    size_t host, wire = elem_size((int)type, &host);
    if (!wire) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "cudnnBackendGetAttribute: attribute type %d", (int)type);
    if (type == CUDNN_TYPE_HANDLE) return gc_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendGetAttribute: handle-typed attributes are not read back");
    if (!elems) requested = 0;
    if (requested < 0 || requested > MAX_ELEMS) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: %lld elements", (long long)requested);
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (g->local) { /* answered from what was set, as cuDNN would */
        if (!g->finalized) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "cudnnBackendGetAttribute: the variant pack is not finalized");
        const struct local_attr *a = local_get(g, (uint32_t)name);
        if (a && a->type != (uint32_t)type) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: attribute %d has type %u", (int)name, a->type);
        int64_t have = a ? a->count : 0;
        for (int64_t i = 0; i < requested && i < have; i++) {
            uint8_t *out = (uint8_t *)elems + (size_t)i * host;
            if (type == CUDNN_TYPE_VOID_PTR) {
                uint64_t p;
                memcpy(&p, a->elems + i * 8, 8);
                *(void **)out = (void *)(uintptr_t)p;
            } else {
                memcpy(out, a->elems + (size_t)i * wire, wire);
            }
        }
        if (count) *count = have;
        return CUDNN_STATUS_SUCCESS;
    }
    if (g->bv.substituted && name == GC_ATTR_VARIANT_PACK_DATA_POINTERS && type == CUDNN_TYPE_VOID_PTR) {
        /* the worker holds its own copies of the by-value scalars: the caller's pointers are here */
        for (int64_t i = 0; i < requested && i < g->bv.nptrs; i++) ((void **)elems)[i] = g->bv.ptrs[i];
        if (count) *count = g->bv.nptrs;
        return CUDNN_STATUS_SUCCESS;
    }
    struct gc_dnn_result r;
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) { /* cuDNN fills in the caller's descriptors */
        uint8_t *ids = malloc((size_t)requested * 8 + 1);
        if (!ids) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        for (int64_t i = 0; i < requested; i++)
            if (!put_id((int)type, (cudnnBackendDescriptor_t *)elems + i, ids + i * 8)) {
                free(ids);
                return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: element %lld is not a live descriptor", (long long)i);
            }
        s = get_once(g, name, (int)type, (uint32_t)requested, 0, ids, &r);
        free(ids);
        if (s == CUDNN_STATUS_SUCCESS && count) *count = (int64_t)r.value;
        return s;
    }
    uint32_t per = 128 / (uint32_t)wire, off = 0;
    do {
        s = get_once(g, name, (int)type, (uint32_t)requested, off, NULL, &r);
        if (s != CUDNN_STATUS_SUCCESS) return s;
        uint64_t have = r.value < (uint64_t)requested ? r.value : (uint64_t)requested;
        const uint8_t *src = (const uint8_t *)r.data;
        for (uint32_t i = 0; i < per && off + i < have; i++) {
            uint8_t *out = (uint8_t *)elems + (size_t)(off + i) * host;
            if (type == CUDNN_TYPE_VOID_PTR) {
                uint64_t p;
                memcpy(&p, src + i * wire, 8);
                *(void **)out = (void *)(uintptr_t)p;
            } else {
                memcpy(out, src + i * wire, wire);
            }
        }
        off += per;
        if (off >= have) break;
    } while (1);
    if (count) *count = (int64_t)r.value;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
    struct gc_desc *g = desc_of(descriptor);
    if (!g) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: not a live descriptor");
    cudnnStatus_t s = gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (g->local) { /* checked here; the worker's cuDNN finalizes it at each execution */
        const struct local_attr *p = local_get(g, GC_ATTR_VARIANT_PACK_DATA_POINTERS), *u = local_get(g, GC_ATTR_VARIANT_PACK_UNIQUE_IDS);
        if (g->finalized) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: the variant pack is finalized");
        if (p && u && p->count != u->count)
            return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: %u data pointers for %u unique ids", p->count, u->count);
        g->finalized = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    int64_t nv;
    uint8_t *values = gc_bv_pack_values(&g->bv, g->kind, &nv);
    if (values) { /* a by-value scalar: its pointers again, with the values (internal.h) */
        s = send_attr(g, GC_ATTR_VARIANT_PACK_DATA_POINTERS, GC_DNN_TYPE_HOST_VALUES, nv, values, (size_t)nv * 16);
        free(values);
        if (s != CUDNN_STATUS_SUCCESS) return s;
    }
    struct gw_dnn_finalize m = {.desc = g->id};
    uint8_t b[16];
    gw_dnn_finalize_encode(&m, b);
    s = gc_dnn_call(GW_TYPE_DNN_FINALIZE, b, gw_dnn_finalize_size(&m), 0, NULL);
    if (s == CUDNN_STATUS_SUCCESS) gc_bv_finalized(&g->bv, g->kind);
    return s;
}

/* put_pack_attr appends one attribute in DnnExecutePack's framing (wire/spec: name, kind, count,
 * byte length, bytes). */
static uint8_t *put_pack_attr(uint8_t *o, uint32_t name, uint32_t type, uint32_t count, const uint8_t *e, size_t len) {
    uint32_t head[4] = {name, type, count, (uint32_t)len};
    memcpy(o, head, sizeof head);
    if (len) memcpy(o + sizeof head, e, len);
    return o + sizeof head + len;
}

/* execute_local sends a local pack whole with the execution; its by-value scalars are read now,
 * when cuDNN would read them (byvalue.c). */
static cudnnStatus_t execute_local(cudnnHandle_t handle, struct gc_desc *p, struct gc_desc *v) {
    if (!v->finalized) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "cudnnBackendExecute: the variant pack is not finalized");
    int64_t nv = 0;
    uint8_t *values = gc_bv_pack_values(&v->bv, v->kind, &nv);
    size_t n = values ? (size_t)nv * 16 : 0;
    for (int i = 0; i < v->nattrs; i++) n += 16 + v->attrs[i].len;
    if (n > MAX_ELEMS) {
        free(values);
        return gc_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendExecute: a variant pack of %zu bytes (at most %d)", n, MAX_ELEMS);
    }
    uint8_t *attrs = malloc(n + 1), *o = attrs;
    if (!attrs) {
        free(values);
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    }
    for (int i = 0; i < v->nattrs; i++) {
        const struct local_attr *a = &v->attrs[i];
        if (values && a->name == GC_ATTR_VARIANT_PACK_DATA_POINTERS)
            o = put_pack_attr(o, a->name, GC_DNN_TYPE_HOST_VALUES, (uint32_t)nv, values, (size_t)nv * 16);
        else
            o = put_pack_attr(o, a->name, a->type, a->count, a->elems, a->len);
    }
    free(values);
    struct gw_dnn_execute_pack m = {.handle = handle->server, .plan = p->id, .attrs = attrs, .attrs_len = (uint32_t)(o - attrs)};
    size_t mn = gw_dnn_execute_pack_size(&m);
    uint8_t *buf = malloc(mn);
    cudnnStatus_t s = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    if (buf) {
        gw_dnn_execute_pack_encode(&m, buf);
        s = gc_dnn_call(GW_TYPE_DNN_EXECUTE_PACK, buf, mn, 1, NULL);
        free(buf);
    }
    free(attrs);
    return s;
}

/* Sent like a kernel launch, without waiting: the plan and pack were checked when finalized, and
 * errors of execution surface at the next synchronising call. */
EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    cudnnStatus_t s = gc_dnn_check(handle);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    struct gc_desc *p = desc_of(plan), *v = desc_of(pack);
    if (!p || !v) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: not a live plan or variant pack");
    if (v->local) return execute_local(handle, p, v);
    struct gw_dnn_execute m = {.handle = handle->server, .plan = p->id, .pack = v->id};
    uint8_t b[32];
    gw_dnn_execute_encode(&m, b);
    return gc_dnn_call(GW_TYPE_DNN_EXECUTE, b, gw_dnn_execute_size(&m), 1, NULL);
}

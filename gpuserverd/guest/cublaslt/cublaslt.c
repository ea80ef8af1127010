/* gpucloud's libcublasLt.so.13: cuBLASLt remoted at the library API, as libcublas is (../cublas):
 * NVIDIA's libcublasLt carries NVIDIA's runtime inside, which will not start on a driver other
 * than NVIDIA's, so a guest image installs this library in its place and gpuserverd's worker runs
 * NVIDIA's real cuBLASLt.
 *
 * Matmul descriptors, matrix layouts and preferences live here, as attribute lists (each value
 * checked against cublasLt.h's size for it); each call that uses one sends it whole. So the
 * create/set/destroy calls a program makes around every matmul cost no round trip, the heuristic
 * query is one (and none when the same query was answered before: its answer depends only on
 * what it sends), and cublasLtMatmul goes without waiting, like a kernel launch (its errors
 * surface at the next synchronising call). Handles: cublasLtCreate's, or gpucloud libcublas's
 * cublasHandle_t (NVIDIA's serves as a cublasLtHandle_t; PyTorch passes one). */
#define _GNU_SOURCE
#include <cuda.h>
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#define GC_LIB_NAME "libcublasLt"
#include "../cublas/session.h"

#define EXPORT __attribute__((visibility("default")))

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cublaslt_guest = 1;

static cublasStatus_t ready(void) { return session_ready() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED; }

/* ---- attributes (cublasLt.h, CUDA 13): the size of each value; 0: not one this library carries.
 * CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR (38) holds a host object of this process, which the
 * worker cannot read. The same table is backend/lt.go's. */
enum { K_DESC, K_LAYOUT, K_PREF };
static const uint8_t desc_sizes[] = {4, 4, 4, 4, 4, 4, 4, 4, 8, 0, 8, 8, 8, 8, 8, 4, 0, 8, 8, 8,
                                     8, 8, 4, 8, 8, 1, 4, 0, 0, 0, 0, 4, 4, 4, 4, 4, 8, 4};
static const uint8_t layout_sizes[] = {4, 4, 8, 8, 8, 4, 8, 8, 4};
static const uint8_t pref_sizes[] = {4, 8, 0, 4, 0, 4, 4, 4, 4, 4, 0, 0, 8};

static size_t attr_size(int kind, unsigned attr) {
    const uint8_t *t = kind == K_DESC ? desc_sizes : kind == K_LAYOUT ? layout_sizes : pref_sizes;
    size_t n = kind == K_DESC ? sizeof desc_sizes : kind == K_LAYOUT ? sizeof layout_sizes : sizeof pref_sizes;
    return attr < n ? t[attr] : 0;
}

#define OBJ_MAGIC 0x67636c74u
#define MAX_ATTRS 40

struct attr {
    uint32_t id, len;
    uint8_t v[8];
};

struct object {
    uint32_t magic;
    int kind;
    int n;
    struct attr a[MAX_ATTRS];
};

static struct object *obj(const void *p, int kind) {
    struct object *o = (struct object *)p;
    return o && o->magic == OBJ_MAGIC && o->kind == kind ? o : NULL;
}

static struct object *new_obj(int kind) {
    struct object *o = calloc(1, sizeof *o);
    if (o) o->magic = OBJ_MAGIC, o->kind = kind;
    return o;
}

static void free_obj(struct object *o) {
    o->magic = 0;
    free(o);
}

static const struct attr *find(const struct object *o, uint32_t id) {
    for (int i = 0; i < o->n; i++)
        if (o->a[i].id == id) return &o->a[i];
    return NULL;
}

static cublasStatus_t set_attr(struct object *o, int kind, unsigned id, const void *buf, size_t n) {
    if (!o) return CUBLAS_STATUS_NOT_INITIALIZED;
    size_t want = attr_size(kind, id);
    if (!want) return id == 38 && kind == K_DESC ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
    if (!buf || n != want) return CUBLAS_STATUS_INVALID_VALUE;
    struct attr *a = (struct attr *)find(o, id);
    if (!a) {
        if (o->n == MAX_ATTRS) return CUBLAS_STATUS_ALLOC_FAILED;
        a = &o->a[o->n++];
        a->id = id;
    }
    a->len = (uint32_t)n;
    memset(a->v, 0, sizeof a->v);
    memcpy(a->v, buf, n);
    return CUBLAS_STATUS_SUCCESS;
}

static int64_t attr_int(const struct object *o, uint32_t id, int64_t def) {
    const struct attr *a = find(o, id);
    if (!a) return def;
    if (a->len == 4) {
        int32_t v;
        memcpy(&v, a->v, 4);
        return v;
    }
    int64_t v = 0;
    memcpy(&v, a->v, a->len);
    return v;
}

/* encode writes o as the wire's attribute list ("u32 count", then "u32 id, u32 len, value"). */
static size_t encode(const struct object *o, uint8_t *out) {
    uint8_t *p = out;
    uint32_t n = (uint32_t)o->n;
    memcpy(p, &n, 4), p += 4;
    for (int i = 0; i < o->n; i++) {
        memcpy(p, &o->a[i].id, 4), p += 4;
        memcpy(p, &o->a[i].len, 4), p += 4;
        memcpy(p, o->a[i].v, o->a[i].len), p += o->a[i].len;
    }
    return (size_t)(p - out);
}
#define ENCODED_MAX (4 + MAX_ATTRS * 16)

/* ---- handles ---- */

#define HANDLE_MAGIC 0x67636c68u

/* A cublasLtCreate handle: the worker's id and device, nothing more. */
struct cublasLtContext {
    struct session_handle base;
};

/* resolve finds h's server id and device: one of cublasLtCreate's, or a live handle of gpucloud's
 * libcublas (asked through its gpucloud_cublas_handle, when that library is loaded); and makes
 * sure the calling thread works on that device. */
static cublasStatus_t resolve(const void *h, uint64_t *server, int *device) {
    cublasStatus_t s = ready();
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!session_live(h, HANDLE_MAGIC, server, device)) {
        int (*blas)(const void *, uint64_t *, int *) =
            (int (*)(const void *, uint64_t *, int *))dlsym(RTLD_DEFAULT, "gpucloud_cublas_handle");
        if (!blas || !blas(h, server, device)) return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    int r = session_on_device(*device);
    return r == 0 ? CUBLAS_STATUS_SUCCESS : r > 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
}

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    return session_new_handle(sizeof(struct cublasLtContext), HANDLE_MAGIC, GW_TYPE_LT_CREATE, (void **)handle);
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    cublasStatus_t s = ready();
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return session_drop_handle(h, HANDLE_MAGIC);
}

EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

/* ---- descriptors, layouts, preferences ---- */

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                               cudaDataType scale) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    struct object *o = new_obj(K_DESC);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    int32_t c = (int32_t)compute, s = (int32_t)scale;
    set_attr(o, K_DESC, 0, &c, 4);
    set_attr(o, K_DESC, 1, &s, 4);
    *desc = (cublasLtMatmulDesc_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    struct object *o = new_obj(K_LAYOUT);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    uint32_t t = (uint32_t)type;
    set_attr(o, K_LAYOUT, 0, &t, 4);
    set_attr(o, K_LAYOUT, 2, &rows, 8);
    set_attr(o, K_LAYOUT, 3, &cols, 8);
    set_attr(o, K_LAYOUT, 4, &ld, 8);
    *layout = (cublasLtMatrixLayout_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    struct object *o = new_obj(K_PREF);
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    *pref = (cublasLtMatmulPreference_t)o;
    return CUBLAS_STATUS_SUCCESS;
}

#define DESTROY(fn, type, kind)                                            \
    EXPORT cublasStatus_t fn(type p) {                                     \
        struct object *o = obj(p, kind);                                   \
        if (!p) return CUBLAS_STATUS_SUCCESS; /* as NVIDIA's: NULL is ok */ \
        if (!o) return CUBLAS_STATUS_INVALID_VALUE;                        \
        free_obj(o);                                                       \
        return CUBLAS_STATUS_SUCCESS;                                      \
    }
DESTROY(cublasLtMatmulDescDestroy, cublasLtMatmulDesc_t, K_DESC)
DESTROY(cublasLtMatrixLayoutDestroy, cublasLtMatrixLayout_t, K_LAYOUT)
DESTROY(cublasLtMatmulPreferenceDestroy, cublasLtMatmulPreference_t, K_PREF)

EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t n) {
    return set_attr(obj(d, K_DESC), K_DESC, (unsigned)attr, buf, n);
}
EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t n) {
    return set_attr(obj(l, K_LAYOUT), K_LAYOUT, (unsigned)attr, buf, n);
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                           size_t n) {
    return set_attr(obj(p, K_PREF), K_PREF, (unsigned)attr, buf, n);
}

/* get_attr answers from what was set; an attribute left at its default is asked of the worker's
 * cuBLASLt, which knows its defaults. */
static cublasStatus_t get_attr(const struct object *o, int kind, unsigned id, void *buf, size_t n, size_t *written) {
    if (!o) return CUBLAS_STATUS_NOT_INITIALIZED;
    size_t want = attr_size(kind, id);
    if (!want) return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0 && !buf) {
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = want;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || n < want) return CUBLAS_STATUS_INVALID_VALUE;
    const struct attr *a = find(o, id);
    if (a) {
        memcpy(buf, a->v, want);
        if (written) *written = want;
        return CUBLAS_STATUS_SUCCESS;
    }
    cublasStatus_t s = ready();
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    uint8_t ob[ENCODED_MAX];
    struct gw_lt_get_attribute m = {.kind = (uint32_t)kind, .attribute = id, .size = want};
    m.object = ob;
    m.object_len = (uint32_t)encode(o, ob);
    uint8_t b[ENCODED_MAX + 64];
    gw_lt_get_attribute_encode(&m, b);
    struct gw_lt_attribute_reply r = {0};
    CUresult rc = T->request(GW_TYPE_LT_GET_ATTRIBUTE, 0, b, gw_lt_get_attribute_size(&m), GW_TYPE_LT_ATTRIBUTE_REPLY, &r);
    if (r.status != 0) return (cublasStatus_t)r.status;
    if (rc != CUDA_SUCCESS) return CUBLAS_STATUS_INTERNAL_ERROR;
    memcpy(buf, &r.value, want);
    if (written) *written = r.size;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     void *buf, size_t n, size_t *written) {
    return get_attr(obj(d, K_DESC), K_DESC, (unsigned)attr, buf, n, written);
}
EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       void *buf, size_t n, size_t *written) {
    return get_attr(obj(l, K_LAYOUT), K_LAYOUT, (unsigned)attr, buf, n, written);
}
EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                           size_t n, size_t *written) {
    return get_attr(obj(p, K_PREF), K_PREF, (unsigned)attr, buf, n, written);
}

/* ---- the heuristic, with its answers kept ---- */

#define CACHE_SIZE 64
#define QUERY_MAX (6 * ENCODED_MAX + 64)

static struct cached {
    size_t n;
    uint8_t *query; /* the encoded request: handle, objects, count */
    int count;
    cublasLtMatmulHeuristicResult_t r[4];
} cache[CACHE_SIZE];
static int cache_next;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static int cache_get(const uint8_t *q, size_t n, cublasLtMatmulHeuristicResult_t *out, int want) {
    int found = -1;
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < CACHE_SIZE && found < 0; i++)
        if (cache[i].query && cache[i].n == n && memcmp(cache[i].query, q, n) == 0) {
            found = cache[i].count < want ? cache[i].count : want;
            memcpy(out, cache[i].r, (size_t)found * sizeof *out);
        }
    pthread_mutex_unlock(&cache_mu);
    return found;
}

static void cache_put(const uint8_t *q, size_t n, const cublasLtMatmulHeuristicResult_t *r, int count) {
    uint8_t *copy = malloc(n);
    if (!copy) return;
    memcpy(copy, q, n);
    pthread_mutex_lock(&cache_mu);
    struct cached *c = &cache[cache_next];
    cache_next = (cache_next + 1) % CACHE_SIZE;
    free(c->query);
    c->query = copy, c->n = n, c->count = count;
    memcpy(c->r, r, (size_t)count * sizeof *r);
    pthread_mutex_unlock(&cache_mu);
}

static void result_from(const struct gw_lt_heuristic_reply *r, int i, cublasLtMatmulHeuristicResult_t *out) {
    const uint64_t *w[4][8] = {
        {&r->algo0_w0, &r->algo0_w1, &r->algo0_w2, &r->algo0_w3, &r->algo0_w4, &r->algo0_w5, &r->algo0_w6, &r->algo0_w7},
        {&r->algo1_w0, &r->algo1_w1, &r->algo1_w2, &r->algo1_w3, &r->algo1_w4, &r->algo1_w5, &r->algo1_w6, &r->algo1_w7},
        {&r->algo2_w0, &r->algo2_w1, &r->algo2_w2, &r->algo2_w3, &r->algo2_w4, &r->algo2_w5, &r->algo2_w6, &r->algo2_w7},
        {&r->algo3_w0, &r->algo3_w1, &r->algo3_w2, &r->algo3_w3, &r->algo3_w4, &r->algo3_w5, &r->algo3_w6, &r->algo3_w7},
    };
    const uint64_t ws[4] = {r->workspace0, r->workspace1, r->workspace2, r->workspace3};
    const int32_t st[4] = {r->state0, r->state1, r->state2, r->state3};
    const float wv[4] = {r->waves0, r->waves1, r->waves2, r->waves3};
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 8; k++) out->algo.data[k] = *w[i][k];
    out->workspaceSize = (size_t)ws[i];
    out->state = (cublasStatus_t)st[i];
    out->wavesCount = wv[i];
}

EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t results[], int *count) {
    uint64_t server;
    int dev;
    cublasStatus_t s = resolve(h, &server, &dev);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const struct object *od = obj(desc, K_DESC), *oa = obj(A, K_LAYOUT), *ob = obj(B, K_LAYOUT),
                        *oc = obj(C, K_LAYOUT), *odd = obj(D, K_LAYOUT), *op = obj(pref, K_PREF);
    if (!od || !oa || !ob || !oc || !odd || !op || requested <= 0 || !results || !count)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint8_t e[6][ENCODED_MAX];
    struct gw_lt_heuristic m = {.handle = server, .requested = (uint32_t)requested};
    m.desc = e[0], m.desc_len = (uint32_t)encode(od, e[0]);
    m.a = e[1], m.a_len = (uint32_t)encode(oa, e[1]);
    m.b = e[2], m.b_len = (uint32_t)encode(ob, e[2]);
    m.c = e[3], m.c_len = (uint32_t)encode(oc, e[3]);
    m.d = e[4], m.d_len = (uint32_t)encode(odd, e[4]);
    m.pref = e[5], m.pref_len = (uint32_t)encode(op, e[5]);
    uint8_t b[QUERY_MAX];
    size_t n = gw_lt_heuristic_size(&m);
    if (n > sizeof b) return CUBLAS_STATUS_INTERNAL_ERROR;
    gw_lt_heuristic_encode(&m, b);
    /* the answer depends on the query and the device's library only: the query names the device
     * through its handle id, so a cached answer is the worker's answer */
    int got = cache_get(b, n, results, requested);
    if (got >= 0) {
        *count = got;
        return got ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    struct gw_lt_heuristic_reply r = {0};
    CUresult rc = T->request(GW_TYPE_LT_HEURISTIC, 0, b, n, GW_TYPE_LT_HEURISTIC_REPLY, &r);
    if (r.status != 0) {
        if (getenv("GPUCLOUD_DEBUG"))
            fprintf(stderr, "gpucloud: cublasLtMatmulAlgoGetHeuristic failed (status %d): %.*s\n", r.status,
                    (int)r.message_len, r.message);
        return (cublasStatus_t)r.status;
    }
    if (rc != CUDA_SUCCESS) return CUBLAS_STATUS_INTERNAL_ERROR;
    int k = (int)r.count;
    if (k > requested) k = requested;
    if (k > 4) k = 4;
    for (int i = 0; i < k; i++) result_from(&r, i, &results[i]);
    *count = k;
    cache_put(b, n, results, k);
    return k ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* ---- matmul ---- */

static size_t scale_size(int64_t t) {
    switch (t) {
    case 0: case 10: return 4;        /* CUDA_R_32F, R_32I */
    case 1: case 4: return 8;         /* R_64F, C_32F */
    case 5: return 16;                /* C_64F */
    case 2: case 14: return 2;        /* R_16F, R_16BF */
    case 3: return 1;                 /* R_8I */
    }
    return 0;
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                     cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                     size_t workspace_size, cudaStream_t stream) {
    uint64_t server;
    int dev;
    cublasStatus_t s = resolve(h, &server, &dev);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const struct object *od = obj(desc, K_DESC), *oa = obj(Adesc, K_LAYOUT), *ob = obj(Bdesc, K_LAYOUT),
                        *oc = obj(Cdesc, K_LAYOUT), *odd = obj(Ddesc, K_LAYOUT);
    if (!od || !oa || !ob || !oc || !odd || !alpha) return CUBLAS_STATUS_INVALID_VALUE;
    int64_t mode = attr_int(od, 2, 0);
    size_t ss = scale_size(attr_int(od, 1, -1));
    if (!ss || mode < 0 || mode > 4) return CUBLAS_STATUS_INVALID_VALUE;
    int alpha_dev = mode != 0, beta_dev = mode == 1 || mode == 2, beta_used = mode != 3;
    if (beta_used && !beta) return CUBLAS_STATUS_INVALID_VALUE;
    uint8_t av[16], bv[16], al[64];
    uint64_t ap = (uint64_t)(uintptr_t)alpha, bp = (uint64_t)(uintptr_t)beta;
    struct gw_lt_matmul m = {
        .handle = server, .a = (uint64_t)(uintptr_t)A, .b = (uint64_t)(uintptr_t)B, .c = (uint64_t)(uintptr_t)C,
        .d = (uint64_t)(uintptr_t)D, .workspace = (uint64_t)(uintptr_t)workspace, .workspace_size = workspace_size,
        .stream = T->stream_handle((CUstream)stream),
    };
    if (alpha_dev) memcpy(av, &ap, 8), m.alpha_len = 8;
    else memcpy(av, alpha, ss), m.alpha_len = (uint32_t)ss;
    if (beta_used) {
        if (beta_dev) memcpy(bv, &bp, 8), m.beta_len = 8;
        else memcpy(bv, beta, ss), m.beta_len = (uint32_t)ss;
    }
    m.alpha = av, m.beta = bv;
    if (algo) memcpy(al, algo->data, 64), m.algo = al, m.algo_len = 64;
    uint8_t e[5][ENCODED_MAX];
    m.desc = e[0], m.desc_len = (uint32_t)encode(od, e[0]);
    m.adesc = e[1], m.adesc_len = (uint32_t)encode(oa, e[1]);
    m.bdesc = e[2], m.bdesc_len = (uint32_t)encode(ob, e[2]);
    m.cdesc = e[3], m.cdesc_len = (uint32_t)encode(oc, e[3]);
    m.ddesc = e[4], m.ddesc_len = (uint32_t)encode(odd, e[4]);
    uint8_t b[QUERY_MAX + 256];
    size_t n = gw_lt_matmul_size(&m);
    if (n > sizeof b) return CUBLAS_STATUS_INTERNAL_ERROR;
    gw_lt_matmul_encode(&m, b);
    return session_call(GW_TYPE_LT_MATMUL, b, n, 1, NULL);
}

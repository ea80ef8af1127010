/* gpucloud's libcudnn.so.9: cuDNN's legacy API. Tensor, filter, convolution, pooling and
 * activation descriptors are kept here, in the program's memory (32 words each, the layout of
 * backend.DnnDesc); a call that computes or asks NVIDIA's cuDNN something sends the descriptors
 * it names with it. Computing calls go without waiting, like kernel launches; queries wait. */
#include "internal.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>

#define LDESC_MAGIC 0x67636c64u

enum { K_TENSOR = 1, K_FILTER = 2, K_CONV = 3, K_POOL = 4, K_ACT = 5 };

struct gc_ldesc {
    uint32_t magic;
    int32_t w[32]; /* backend.DnnDesc */
};
struct cudnnTensorStruct { struct gc_ldesc d; };
struct cudnnFilterStruct { struct gc_ldesc d; };
struct cudnnConvolutionStruct { struct gc_ldesc d; };
struct cudnnPoolingStruct { struct gc_ldesc d; };
struct cudnnActivationStruct { struct gc_ldesc d; };

/* ldesc_of is a live descriptor of kind k, or NULL. */
static struct gc_ldesc *ldesc_of(void *p, int k) {
    struct gc_ldesc *d = p;
    return d && d->magic == LDESC_MAGIC && d->w[0] == k ? d : NULL;
}

static cudnnStatus_t create(void **out, int k) {
    if (!out) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    struct gc_ldesc *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    d->magic = LDESC_MAGIC;
    d->w[0] = k;
    if (k == K_CONV) d->w[22] = 1; /* one group */
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t destroy(void *p, int k) {
    if (!p) return CUDNN_STATUS_SUCCESS; /* as cuDNN: destroying NULL is a no-op */
    struct gc_ldesc *d = ldesc_of(p, k);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    d->magic = 0;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

#define LIFECYCLE(Name, type, k)                                                                    \
    EXPORT cudnnStatus_t cudnnCreate##Name##Descriptor(type *d) { return create((void **)d, k); }   \
    EXPORT cudnnStatus_t cudnnDestroy##Name##Descriptor(type d) { return destroy(d, k); }
LIFECYCLE(Tensor, cudnnTensorDescriptor_t, K_TENSOR)
LIFECYCLE(Filter, cudnnFilterDescriptor_t, K_FILTER)
LIFECYCLE(Convolution, cudnnConvolutionDescriptor_t, K_CONV)
LIFECYCLE(Pooling, cudnnPoolingDescriptor_t, K_POOL)
LIFECYCLE(Activation, cudnnActivationDescriptor_t, K_ACT)

/* ---- setters and getters ---- */

EXPORT cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t t, cudnnDataType_t type, int nb, const int dims[], const int strides[]) {
    struct gc_ldesc *d = ldesc_of(t, K_TENSOR);
    if (!d || nb < 1 || nb > 8 || !dims || !strides) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < nb; i++)
        if (dims[i] <= 0 || strides[i] <= 0) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensorNdDescriptor: dimension %d", i);
    d->w[1] = type;
    d->w[2] = nb;
    for (int i = 0; i < 8; i++) {
        d->w[3 + i] = i < nb ? dims[i] : 0;
        d->w[11 + i] = i < nb ? strides[i] : 0;
    }
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t t, int req, cudnnDataType_t *type, int *nb, int dims[], int strides[]) {
    struct gc_ldesc *d = ldesc_of(t, K_TENSOR);
    if (!d || req < 0 || !type || !nb) return CUDNN_STATUS_BAD_PARAM;
    *type = (cudnnDataType_t)d->w[1];
    *nb = d->w[2];
    for (int i = 0; i < req && i < d->w[2]; i++) {
        if (dims) dims[i] = d->w[3 + i];
        if (strides) strides[i] = d->w[11 + i];
    }
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t f, cudnnDataType_t type, cudnnTensorFormat_t format, int nb, const int dims[]) {
    struct gc_ldesc *d = ldesc_of(f, K_FILTER);
    if (!d || nb < 3 || nb > 8 || !dims) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < nb; i++)
        if (dims[i] <= 0) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilterNdDescriptor: dimension %d", i);
    d->w[1] = type;
    d->w[2] = format;
    d->w[3] = nb;
    for (int i = 0; i < 8; i++) d->w[4 + i] = i < nb ? dims[i] : 0;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t f, int req, cudnnDataType_t *type, cudnnTensorFormat_t *format, int *nb, int dims[]) {
    struct gc_ldesc *d = ldesc_of(f, K_FILTER);
    if (!d || req < 0 || !type || !format || !nb) return CUDNN_STATUS_BAD_PARAM;
    *type = (cudnnDataType_t)d->w[1];
    *format = (cudnnTensorFormat_t)d->w[2];
    *nb = d->w[3];
    for (int i = 0; i < req && i < d->w[3] && dims; i++) dims[i] = d->w[4 + i];
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t c, int n, const int pads[], const int strides[],
                                                     const int dil[], cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
    struct gc_ldesc *d = ldesc_of(c, K_CONV);
    if (!d || n < 1 || n > 6 || !pads || !strides || !dil || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
        return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < n; i++)
        if (pads[i] < 0 || strides[i] <= 0 || dil[i] <= 0) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionNdDescriptor: dimension %d", i);
    d->w[1] = n;
    for (int i = 0; i < 6; i++) {
        d->w[2 + i] = i < n ? pads[i] : 0;
        d->w[8 + i] = i < n ? strides[i] : 0;
        d->w[14 + i] = i < n ? dil[i] : 0;
    }
    d->w[20] = mode;
    d->w[21] = compute;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t c, int groups) {
    struct gc_ldesc *d = ldesc_of(c, K_CONV);
    if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
    d->w[22] = groups;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t c, cudnnMathType_t math) {
    struct gc_ldesc *d = ldesc_of(c, K_CONV);
    if (!d || (int)math < 0 || (int)math > 3) return CUDNN_STATUS_BAD_PARAM;
    d->w[23] = math;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t p, cudnnPoolingMode_t mode, cudnnNanPropagation_t nan, int wh,
                                                 int ww, int ph, int pw, int sh, int sw) {
    struct gc_ldesc *d = ldesc_of(p, K_POOL);
    if (!d || wh <= 0 || ww <= 0 || ph < 0 || pw < 0 || sh <= 0 || sw <= 0) return CUDNN_STATUS_BAD_PARAM;
    const int32_t v[] = {mode, nan, 2, wh, ww, 0, 0, 0, 0, ph, pw, 0, 0, 0, 0, sh, sw};
    memcpy(&d->w[1], v, sizeof v);
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t a, cudnnActivationMode_t mode, cudnnNanPropagation_t nan, double coef) {
    struct gc_ldesc *d = ldesc_of(a, K_ACT);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    d->w[1] = mode;
    d->w[2] = nan;
    memcpy(&d->w[3], &coef, 8);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- calls ---- */

/* A legacy call being built: its descriptors and argument words. */
struct call {
    uint32_t op;
    int ndesc, nargs;
    int32_t descs[8][32];
    uint64_t args[32];
    int bad;
};

/* add_desc appends a descriptor of kind k; an absent optional one (opt) travels as an all-zero
 * tensor the worker reads as none. */
static void add_desc(struct call *c, void *p, int k, int opt) {
    struct gc_ldesc *d = ldesc_of(p, k);
    if (!d && !(opt && !p)) c->bad = 1;
    if (c->ndesc < 8) {
        if (d) memcpy(c->descs[c->ndesc], d->w, sizeof d->w);
        else {
            memset(c->descs[c->ndesc], 0, sizeof c->descs[0]);
            c->descs[c->ndesc][0] = K_TENSOR; /* nbDims 0: none */
        }
    }
    c->ndesc++;
}

static void add(struct call *c, uint64_t v) {
    if (c->nargs < 32) c->args[c->nargs] = v;
    c->nargs++;
}
static void add_ptr(struct call *c, const void *p) { add(c, (uint64_t)(uintptr_t)p); }

/* add_scalar appends a host scaling factor as float64 bits: a double for double data, a float
 * otherwise (cuDNN's rule). */
static void add_scalar(struct call *c, const void *p, int32_t dtype) {
    double v = 0;
    if (!p) c->bad = 1;
    else if (dtype == CUDNN_DATA_DOUBLE) memcpy(&v, p, 8);
    else v = *(const float *)p;
    uint64_t bits;
    memcpy(&bits, &v, 8);
    add(c, bits);
}
static void add_double(struct call *c, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    add(c, bits);
}

static cudnnStatus_t send(cudnnHandle_t h, struct call *c, int no_reply, struct gc_dnn_result *r) {
    cudnnStatus_t s = h ? gc_dnn_check(h) : gc_dnn_ready();
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if (c->bad || c->ndesc > 8 || c->nargs > 32) return gc_dnn_fail(CUDNN_STATUS_BAD_PARAM, "legacy call %u: a descriptor or argument is missing or of the wrong kind", c->op);
    uint8_t descs[8 * 128], args[32 * 8];
    memcpy(descs, c->descs, (size_t)c->ndesc * 128);
    memcpy(args, c->args, (size_t)c->nargs * 8);
    struct gw_dnn_legacy m = {.op = c->op, .handle = h ? h->server : 0, .descs = descs, .descs_len = (uint32_t)c->ndesc * 128,
                              .args = args, .args_len = (uint32_t)c->nargs * 8};
    GC_DNN_SEND(dnn_legacy, DNN_LEGACY, m, no_reply, r);
}

/* Size queries (workspace and reserve sizes) are answered from the query's descriptors and
 * arguments alone, and PyTorch asks before every batch norm (three round trips per layer and
 * step): the answers are kept here, keyed by the whole query, in a small direct-mapped table. */
#define SIZE_MEMO 256
static struct {
    uint64_t hash;
    uint8_t *key;
    size_t keylen, size;
} size_memo[SIZE_MEMO];
static pthread_mutex_t size_memo_mu = PTHREAD_MUTEX_INITIALIZER;

/* size_key is the query's bytes (op, device, descriptors, arguments), malloc'd, and its hash. */
static uint8_t *size_key(cudnnHandle_t h, const struct call *c, size_t *len, uint64_t *hash) {
    if (c->ndesc > 8 || c->nargs > 32) return NULL;
    int32_t head[4] = {(int32_t)c->op, h ? h->device : -1, c->ndesc, c->nargs};
    size_t dn = (size_t)c->ndesc * sizeof c->descs[0], an = (size_t)c->nargs * 8;
    *len = sizeof head + dn + an;
    uint8_t *k = malloc(*len);
    if (!k) return NULL;
    memcpy(k, head, sizeof head);
    memcpy(k + sizeof head, c->descs, dn);
    memcpy(k + sizeof head + dn, c->args, an);
    uint64_t x = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < *len; i++) x = (x ^ k[i]) * 1099511628211ull;
    *hash = x;
    return k;
}

/* send_size answers a size query, from the table or from the worker's cuDNN. */
static cudnnStatus_t send_size(cudnnHandle_t h, struct call *c, size_t *size) {
    size_t len = 0;
    uint64_t hash = 0;
    uint8_t *key = c->bad ? NULL : size_key(h, c, &len, &hash);
    if (key) {
        pthread_mutex_lock(&size_memo_mu);
        typeof(size_memo[0]) *m = &size_memo[hash % SIZE_MEMO];
        int hit = m->key && m->hash == hash && m->keylen == len && memcmp(m->key, key, len) == 0;
        if (hit) *size = m->size;
        pthread_mutex_unlock(&size_memo_mu);
        if (hit && (!h || gc_dnn_check(h) == CUDNN_STATUS_SUCCESS)) {
            free(key);
            return CUDNN_STATUS_SUCCESS;
        }
    }
    struct gc_dnn_result r;
    cudnnStatus_t s = send(h, c, 0, &r);
    if (s == CUDNN_STATUS_SUCCESS) *size = (size_t)r.value;
    if (s == CUDNN_STATUS_SUCCESS && key) {
        pthread_mutex_lock(&size_memo_mu);
        typeof(size_memo[0]) *m = &size_memo[hash % SIZE_MEMO];
        free(m->key);
        m->hash = hash, m->key = key, m->keylen = len, m->size = *size, key = NULL;
        pthread_mutex_unlock(&size_memo_mu);
    }
    free(key);
    return s;
}

static int32_t dtype_of(void *tensor) {
    struct gc_ldesc *d = ldesc_of(tensor, K_TENSOR);
    return d ? d->w[1] : CUDNN_DATA_FLOAT;
}

/* Ops: backend.DnnOp*. */
enum {
    OP_CONV_FWD = 1, OP_CONV_BWD_DATA, OP_CONV_BWD_FILTER, OP_FWD_ALGOS, OP_BWD_DATA_ALGOS, OP_BWD_FILTER_ALGOS, OP_FWD_WS,
    OP_BWD_DATA_WS, OP_BWD_FILTER_WS, OP_POOL_FWD, OP_DROPOUT_SIZE, OP_BN_INFER, OP_BN_TRAIN_WS, OP_BN_RESERVE, OP_BN_TRAIN,
    OP_BN_BWD_WS, OP_BN_BWD
};

/* conv runs one of the three convolutions: descriptors a, b, conv, out (kinds ka, kb, kout). */
static cudnnStatus_t conv(uint32_t op, cudnnHandle_t h, const void *alpha, void *a, int ka, const void *pa, void *b, int kb,
                          const void *pb, cudnnConvolutionDescriptor_t cd, int algo, void *ws, size_t ws_bytes, const void *beta,
                          void *out, int kout, void *pout) {
    struct call c = {.op = op};
    add_desc(&c, a, ka, 0);
    add_desc(&c, b, kb, 0);
    add_desc(&c, cd, K_CONV, 0);
    add_desc(&c, out, kout, 0);
    int32_t dt = dtype_of(ka == K_TENSOR ? a : b);
    add(&c, (uint64_t)(uint32_t)algo);
    add_ptr(&c, pa);
    add_ptr(&c, pb);
    add_ptr(&c, ws);
    add(&c, ws_bytes);
    add_ptr(&c, pout);
    add_scalar(&c, alpha, dt);
    add_scalar(&c, beta, dt);
    if (!pa || !pb || !pout) c.bad = 1;
    return send(h, &c, 1, NULL);
}

EXPORT cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes, const void *beta,
                                             const cudnnTensorDescriptor_t yd, void *y) {
    return conv(OP_CONV_FWD, h, alpha, xd, K_TENSOR, x, wd, K_FILTER, w, cd, algo, ws, ws_bytes, beta, yd, K_TENSOR, y);
}

EXPORT cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,
                                                  const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd,
                                                  cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t ws_bytes, const void *beta,
                                                  const cudnnTensorDescriptor_t dxd, void *dx) {
    return conv(OP_CONV_BWD_DATA, h, alpha, wd, K_FILTER, w, dyd, K_TENSOR, dy, cd, algo, ws, ws_bytes, beta, dxd, K_TENSOR, dx);
}

EXPORT cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                                    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd,
                                                    cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_bytes, const void *beta,
                                                    const cudnnFilterDescriptor_t dwd, void *dw) {
    return conv(OP_CONV_BWD_FILTER, h, alpha, xd, K_TENSOR, x, dyd, K_TENSOR, dy, cd, algo, ws, ws_bytes, beta, dwd, K_FILTER, dw);
}

/* query asks about a convolution (descriptors a, b, conv, out) with one argument word. */
/* conv_query fills in a convolution query's call: descriptors a, b, cd, out and one argument. */
static void conv_query(struct call *c, void *a, int ka, void *b, int kb, void *cd, void *out, int kout, uint64_t arg) {
    add_desc(c, a, ka, 0);
    add_desc(c, b, kb, 0);
    add_desc(c, cd, K_CONV, 0);
    add_desc(c, out, kout, 0);
    add(c, arg);
}

static cudnnStatus_t query(uint32_t op, cudnnHandle_t h, void *a, int ka, void *b, int kb, void *cd, void *out, int kout,
                           uint64_t arg, struct gc_dnn_result *r) {
    struct call c = {.op = op};
    conv_query(&c, a, ka, b, kb, cd, out, kout, arg);
    return send(h, &c, 0, r);
}

/* Algorithm results travel two words each: algo | status<<8 | determinism<<16 | mathType<<24 |
 * time's float bits<<32, then the workspace bytes; at most 8. The perf structs of the three
 * directions share one layout. */
static cudnnStatus_t algos(uint32_t op, cudnnHandle_t h, void *a, int ka, void *b, int kb, void *cd, void *out, int kout, int req,
                           int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    if (req < 1 || !returned || !perf) return CUDNN_STATUS_BAD_PARAM;
    struct gc_dnn_result r;
    cudnnStatus_t s = query(op, h, a, ka, b, kb, cd, out, kout, (uint64_t)(req < 8 ? req : 8), &r);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    int n = r.value < 8 ? (int)r.value : 8;
    if (n > req) n = req;
    for (int i = 0; i < n; i++) {
        uint64_t w0 = r.data[2 * i];
        memset(&perf[i], 0, sizeof perf[i]);
        perf[i].algo = (int)(w0 & 0xff);
        perf[i].status = (cudnnStatus_t)((w0 >> 8) & 0xff ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS);
        perf[i].determinism = (cudnnDeterminism_t)((w0 >> 16) & 0xff);
        perf[i].mathType = (cudnnMathType_t)((w0 >> 24) & 0xff);
        uint32_t tb = (uint32_t)(w0 >> 32);
        memcpy(&perf[i].time, &tb, 4);
        perf[i].memory = (size_t)r.data[2 * i + 1];
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                                                            const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd, const int req,
                                                            int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    return algos(OP_FWD_ALGOS, h, xd, K_TENSOR, wd, K_FILTER, cd, yd, K_TENSOR, req, returned, perf);
}

EXPORT cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const cudnnTensorDescriptor_t dyd,
                                                                 const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
                                                                 const int req, int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    return algos(OP_BWD_DATA_ALGOS, h, wd, K_FILTER, dyd, K_TENSOR, cd, dxd, K_TENSOR, req, returned, (cudnnConvolutionFwdAlgoPerf_t *)perf);
}

EXPORT cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t dyd,
                                                                   const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd,
                                                                   const int req, int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    return algos(OP_BWD_FILTER_ALGOS, h, xd, K_TENSOR, dyd, K_TENSOR, cd, dwd, K_FILTER, req, returned, (cudnnConvolutionFwdAlgoPerf_t *)perf);
}

static cudnnStatus_t size_query(uint32_t op, cudnnHandle_t h, void *a, int ka, void *b, int kb, void *cd, void *out, int kout, int algo,
                                size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    struct call c = {.op = op};
    conv_query(&c, a, ka, b, kb, cd, out, kout, (uint64_t)(uint32_t)algo);
    return send_size(h, &c, size);
}

EXPORT cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                                                             const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd,
                                                             cudnnConvolutionFwdAlgo_t algo, size_t *size) {
    return size_query(OP_FWD_WS, h, xd, K_TENSOR, wd, K_FILTER, cd, yd, K_TENSOR, algo, size);
}

EXPORT cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const cudnnTensorDescriptor_t dyd,
                                                                  const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
                                                                  cudnnConvolutionBwdDataAlgo_t algo, size_t *size) {
    return size_query(OP_BWD_DATA_WS, h, wd, K_FILTER, dyd, K_TENSOR, cd, dxd, K_TENSOR, algo, size);
}

EXPORT cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t dyd,
                                                                    const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd,
                                                                    cudnnConvolutionBwdFilterAlgo_t algo, size_t *size) {
    return size_query(OP_BWD_FILTER_WS, h, xd, K_TENSOR, dyd, K_TENSOR, cd, dwd, K_FILTER, algo, size);
}

EXPORT cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void *alpha, const cudnnTensorDescriptor_t xd,
                                         const void *x, const void *beta, const cudnnTensorDescriptor_t yd, void *y) {
    struct call c = {.op = OP_POOL_FWD};
    add_desc(&c, pd, K_POOL, 0);
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, yd, K_TENSOR, 0);
    add_scalar(&c, alpha, dtype_of(xd));
    add_ptr(&c, x);
    add_scalar(&c, beta, dtype_of(xd));
    add_ptr(&c, y);
    if (!x || !y) c.bad = 1;
    return send(h, &c, 1, NULL);
}

EXPORT cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t h, size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    struct call c = {.op = OP_DROPOUT_SIZE};
    return send_size(h, &c, size);
}

/* ---- batch normalization ---- */

EXPORT cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
                                                             const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd,
                                                             void *y, const cudnnTensorDescriptor_t bnd, const void *scale, const void *bias,
                                                             const void *mean, const void *var, double eps) {
    struct call c = {.op = OP_BN_INFER};
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, yd, K_TENSOR, 0);
    add_desc(&c, bnd, K_TENSOR, 0);
    add(&c, (uint64_t)(uint32_t)mode);
    add_scalar(&c, alpha, dtype_of(xd));
    add_scalar(&c, beta, dtype_of(xd));
    const void *p[] = {x, y, scale, bias, mean, var};
    for (int i = 0; i < 6; i++) add_ptr(&c, p[i]);
    add_double(&c, eps);
    return send(h, &c, 1, NULL);
}

EXPORT cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                                                                              const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t zd,
                                                                              const cudnnTensorDescriptor_t yd, const cudnnTensorDescriptor_t bnd,
                                                                              const cudnnActivationDescriptor_t ad, size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    struct call c = {.op = OP_BN_TRAIN_WS};
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, zd, K_TENSOR, 1);
    add_desc(&c, yd, K_TENSOR, 0);
    add_desc(&c, bnd, K_TENSOR, 0);
    add_desc(&c, ad, K_ACT, 1);
    add(&c, (uint64_t)(uint32_t)mode);
    add(&c, (uint64_t)(uint32_t)ops);
    return send_size(h, &c, size);
}

EXPORT cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                                                                          const cudnnActivationDescriptor_t ad, const cudnnTensorDescriptor_t xd,
                                                                          size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    struct call c = {.op = OP_BN_RESERVE};
    add_desc(&c, ad, K_ACT, 1);
    add_desc(&c, xd, K_TENSOR, 0);
    add(&c, (uint64_t)(uint32_t)mode);
    add(&c, (uint64_t)(uint32_t)ops);
    return send_size(h, &c, size);
}

EXPORT cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha, const void *beta, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t zd, const void *z, const cudnnTensorDescriptor_t yd, void *y, const cudnnTensorDescriptor_t bnd,
    const void *scale, const void *bias, double factor, void *run_mean, void *run_var, double eps, void *save_mean, void *save_inv_var,
    cudnnActivationDescriptor_t ad, void *ws, size_t ws_bytes, void *reserve, size_t reserve_bytes) {
    struct call c = {.op = OP_BN_TRAIN};
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, zd, K_TENSOR, 1);
    add_desc(&c, yd, K_TENSOR, 0);
    add_desc(&c, bnd, K_TENSOR, 0);
    add_desc(&c, ad, K_ACT, 1);
    add(&c, (uint64_t)(uint32_t)mode);
    add(&c, (uint64_t)(uint32_t)ops);
    add_scalar(&c, alpha, dtype_of(xd));
    add_scalar(&c, beta, dtype_of(xd));
    const void *p[] = {x, z, y, scale, bias};
    for (int i = 0; i < 5; i++) add_ptr(&c, p[i]);
    add_double(&c, factor);
    add_ptr(&c, run_mean);
    add_ptr(&c, run_var);
    add_double(&c, eps);
    add_ptr(&c, save_mean);
    add_ptr(&c, save_inv_var);
    add_ptr(&c, ws);
    add(&c, ws_bytes);
    add_ptr(&c, reserve);
    add(&c, reserve_bytes);
    return send(h, &c, 1, NULL);
}

EXPORT cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                                                                       const cudnnTensorDescriptor_t xd, const cudnnTensorDescriptor_t yd,
                                                                       const cudnnTensorDescriptor_t dyd, const cudnnTensorDescriptor_t dzd,
                                                                       const cudnnTensorDescriptor_t dxd, const cudnnTensorDescriptor_t bnd,
                                                                       const cudnnActivationDescriptor_t ad, size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    struct call c = {.op = OP_BN_BWD_WS};
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, yd, K_TENSOR, 1);
    add_desc(&c, dyd, K_TENSOR, 0);
    add_desc(&c, dzd, K_TENSOR, 1);
    add_desc(&c, dxd, K_TENSOR, 0);
    add_desc(&c, bnd, K_TENSOR, 0);
    add_desc(&c, ad, K_ACT, 1);
    add(&c, (uint64_t)(uint32_t)mode);
    add(&c, (uint64_t)(uint32_t)ops);
    return send_size(h, &c, size);
}

EXPORT cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha_d, const void *beta_d, const void *alpha_p,
    const void *beta_p, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd, const void *y,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnTensorDescriptor_t dzd, void *dz, const cudnnTensorDescriptor_t dxd, void *dx,
    const cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, void *dscale, void *dbias, double eps, const void *save_mean,
    const void *save_inv_var, cudnnActivationDescriptor_t ad, void *ws, size_t ws_bytes, void *reserve, size_t reserve_bytes) {
    struct call c = {.op = OP_BN_BWD};
    add_desc(&c, xd, K_TENSOR, 0);
    add_desc(&c, yd, K_TENSOR, 1);
    add_desc(&c, dyd, K_TENSOR, 0);
    add_desc(&c, dzd, K_TENSOR, 1);
    add_desc(&c, dxd, K_TENSOR, 0);
    add_desc(&c, bnd, K_TENSOR, 0);
    add_desc(&c, ad, K_ACT, 1);
    add(&c, (uint64_t)(uint32_t)mode);
    add(&c, (uint64_t)(uint32_t)ops);
    int32_t dt = dtype_of(xd);
    add_scalar(&c, alpha_d, dt);
    add_scalar(&c, beta_d, dt);
    add_scalar(&c, alpha_p, dt);
    add_scalar(&c, beta_p, dt);
    const void *p[] = {x, y, dy, dz, dx, scale, bias, dscale, dbias};
    for (int i = 0; i < 9; i++) add_ptr(&c, p[i]);
    add_double(&c, eps);
    add_ptr(&c, save_mean);
    add_ptr(&c, save_inv_var);
    add_ptr(&c, ws);
    add(&c, ws_bytes);
    add_ptr(&c, reserve);
    add(&c, reserve_bytes);
    return send(h, &c, 1, NULL);
}

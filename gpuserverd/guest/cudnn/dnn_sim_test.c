/* dnn_sim_test: gpucloud's libcudnn.so.9 over the guest libcuda and a real gpuserverd on the
 * simulated backend (guesttest/cudnn_test.go). Backend descriptors and their attributes (chunked
 * reads, descriptor-typed elements filled in), a legacy fp32 convolution checked against a CPU
 * one, and refusals. With "foreign" it only checks that cudnnCreate fails over another libcuda. */
#include <cuda.h>
#include <cudnn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond);                      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)
#define OK(call) CHECK((call) == CUDNN_STATUS_SUCCESS)

/* cuDNN's values (cudnn_graph.h). */
enum {
    EXECUTION_PLAN = 5, OPERATIONGRAPH = 15, VARIANT_PACK = 16, TENSOR = 17,
    ATTR_OPERATIONGRAPH_HANDLE = 800, ATTR_OPERATIONGRAPH_OPS = 801, ATTR_TENSOR_DIMENSIONS = 902,
    ATTR_TENSOR_UNIQUE_ID = 904, ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    ATTR_TENSOR_DATA_TYPE = 901, ATTR_TENSOR_UID = 906, ATTR_TENSOR_IS_BY_VALUE = 908, ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    TYPE_DATA_TYPE = 1,
};

/* A variant pack naming a by-value tensor (an attention's scale, a host float) finalizes, its
 * value sent in place of the host pointer the worker could not read; the caller reads back its
 * own pointers, as from cuDNN. */
static void by_value_scalar(void) {
    cudnnBackendDescriptor_t t, pack;
    OK(cudnnBackendCreateDescriptor(TENSOR, &t));
    int64_t uid = 77, one = 1;
    bool yes = true;
    int32_t dtype = 0; /* CUDNN_DATA_FLOAT */
    OK(cudnnBackendSetAttribute(t, ATTR_TENSOR_UID, CUDNN_TYPE_INT64, 1, &uid));
    OK(cudnnBackendSetAttribute(t, ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes));
    OK(cudnnBackendSetAttribute(t, ATTR_TENSOR_DATA_TYPE, (cudnnBackendAttributeType_t)TYPE_DATA_TYPE, 1, &dtype));
    OK(cudnnBackendFinalize(t));
    float scale = 0.125f;
    OK(cudnnBackendCreateDescriptor(VARIANT_PACK, &pack));
    void *ptrs[2] = {(void *)0x7f0000003000ull, &scale}, *back[2] = {0};
    int64_t uids[2] = {one, uid}, n = 0;
    OK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs));
    OK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids));
    OK(cudnnBackendFinalize(pack));
    OK(cudnnBackendGetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, &n, back));
    CHECK(n == 2 && back[0] == ptrs[0] && back[1] == ptrs[1]);
    /* gpucloud's own element type is not a caller's to use. */
    CHECK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, (cudnnBackendAttributeType_t)0x6763, 2, ptrs) == CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
    OK(cudnnBackendDestroyDescriptor(pack));
    OK(cudnnBackendDestroyDescriptor(t));
}

static void backend_api(cudnnHandle_t h) {
    cudnnBackendDescriptor_t t, g;
    OK(cudnnBackendCreateDescriptor(TENSOR, &t));
    /* 20 int64s: more than one reply's 128 bytes, so read back in two pieces. */
    int64_t dims[20], back[20] = {0}, n = 0;
    for (int i = 0; i < 20; i++) dims[i] = 1000 + i;
    OK(cudnnBackendSetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 20, dims));
    int64_t uid = 42;
    OK(cudnnBackendSetAttribute(t, ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    /* Read before finalizing: refused, as cuDNN does. */
    CHECK(cudnnBackendGetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 20, &n, back) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    OK(cudnnBackendFinalize(t));
    CHECK(cudnnBackendSetAttribute(t, ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) == CUDNN_STATUS_BAD_PARAM);
    OK(cudnnBackendGetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 20, &n, back));
    CHECK(n == 20 && memcmp(dims, back, sizeof dims) == 0);
    /* The count alone, then fewer than there are. */
    n = 0;
    OK(cudnnBackendGetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, NULL));
    CHECK(n == 20);
    int64_t three[4] = {0, 0, 0, -7};
    OK(cudnnBackendGetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, &n, three));
    CHECK(three[0] == 1000 && three[2] == 1002 && three[3] == -7);
    /* The wrong type is refused. */
    float f;
    CHECK(cudnnBackendGetAttribute(t, ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_FLOAT, 1, &n, &f) == CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);

    /* Descriptor- and handle-typed elements travel as the session's ids. */
    OK(cudnnBackendCreateDescriptor(OPERATIONGRAPH, &g));
    OK(cudnnBackendSetAttribute(g, ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
    OK(cudnnBackendSetAttribute(g, ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    int bogus[4] = {0};
    void *bad = bogus;
    CHECK(cudnnBackendSetAttribute(g, ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bad) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBackendSetAttribute(g, ATTR_OPERATIONGRAPH_OPS, 99, 1, &t) == CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
    OK(cudnnBackendFinalize(g));
    /* Reading a descriptor-typed attribute fills in the caller's descriptor. */
    cudnnBackendDescriptor_t copy;
    OK(cudnnBackendCreateDescriptor(TENSOR, &copy));
    OK(cudnnBackendGetAttribute(g, ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &copy));
    CHECK(n == 1);
    int64_t got = 0;
    OK(cudnnBackendGetAttribute(copy, ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &got));
    CHECK(got == 42);

    /* Device addresses come back as they went. */
    cudnnBackendDescriptor_t pack, plan;
    OK(cudnnBackendCreateDescriptor(VARIANT_PACK, &pack));
    void *ptrs[2] = {(void *)0x7f0000001000ull, (void *)0x7f0000002000ull}, *pback[2] = {0};
    OK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs));
    OK(cudnnBackendFinalize(pack));
    OK(cudnnBackendGetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, &n, pback));
    CHECK(pback[0] == ptrs[0] && pback[1] == ptrs[1]);

    /* The simulated backend runs no plans: Execute is sent without waiting, and its refusal
     * surfaces at the next synchronisation, once. */
    OK(cudnnBackendCreateDescriptor(EXECUTION_PLAN, &plan));
    OK(cudnnBackendExecute(h, plan, pack));
    CHECK(cuCtxSynchronize() == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS);

    cudnnBackendDescriptor_t all[] = {t, g, copy, pack, plan};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) OK(cudnnBackendDestroyDescriptor(all[i]));
}

/* conv_ref is a cross-correlation of x (n c h w) with w (k c r s), padding pad, stride str. */
static void conv_ref(const float *x, const float *w, float *y, int n, int c, int hh, int ww, int k, int r, int s, int pad, int str,
                     int p, int q, float alpha, float beta) {
    for (int in = 0; in < n; in++)
        for (int ik = 0; ik < k; ik++)
            for (int ip = 0; ip < p; ip++)
                for (int iq = 0; iq < q; iq++) {
                    double sum = 0;
                    for (int ic = 0; ic < c; ic++)
                        for (int ir = 0; ir < r; ir++)
                            for (int is = 0; is < s; is++) {
                                int ih = ip * str - pad + ir, iw = iq * str - pad + is;
                                if (ih < 0 || ih >= hh || iw < 0 || iw >= ww) continue;
                                sum += x[((in * c + ic) * hh + ih) * ww + iw] * w[((ik * c + ic) * r + ir) * s + is];
                            }
                    float *o = &y[((in * k + ik) * p + ip) * q + iq];
                    *o = (float)(alpha * sum + beta * *o);
                }
}

static void legacy_conv(cudnnHandle_t h) {
    enum { N = 2, C = 3, H = 6, W = 5, K = 4, R = 3, S = 3, PAD = 1, STR = 2 };
    const int P = (H + 2 * PAD - R) / STR + 1, Q = (W + 2 * PAD - S) / STR + 1;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    OK(cudnnCreateTensorDescriptor(&xd));
    OK(cudnnCreateTensorDescriptor(&yd));
    OK(cudnnCreateFilterDescriptor(&wd));
    OK(cudnnCreateConvolutionDescriptor(&cd));
    int xdims[] = {N, C, H, W}, xstr[] = {C * H * W, H * W, W, 1};
    int ydims[] = {N, K, P, Q}, ystr[] = {K * P * Q, P * Q, Q, 1};
    int wdims[] = {K, C, R, S}, pads[] = {PAD, PAD}, strs[] = {STR, STR}, dil[] = {1, 1};
    OK(cudnnSetTensorNdDescriptor(xd, CUDNN_DATA_FLOAT, 4, xdims, xstr));
    OK(cudnnSetTensorNdDescriptor(yd, CUDNN_DATA_FLOAT, 4, ydims, ystr));
    OK(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wdims));
    OK(cudnnSetConvolutionNdDescriptor(cd, 2, pads, strs, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    OK(cudnnSetConvolutionMathType(cd, CUDNN_DEFAULT_MATH));
    /* The getters give back what was set. */
    cudnnDataType_t dt;
    int nb, d[4], st[4];
    OK(cudnnGetTensorNdDescriptor(xd, 4, &dt, &nb, d, st));
    CHECK(dt == CUDNN_DATA_FLOAT && nb == 4 && d[1] == C && st[2] == W);
    cudnnTensorFormat_t fmt;
    OK(cudnnGetFilterNdDescriptor(wd, 4, &dt, &fmt, &nb, d));
    CHECK(nb == 4 && d[0] == K && d[3] == S && fmt == CUDNN_TENSOR_NCHW);

    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int got = 0;
    OK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &got, perf));
    CHECK(got >= 1 && perf[0].status == CUDNN_STATUS_SUCCESS);
    size_t ws = 99;
    OK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, perf[0].algo, &ws));
    CHECK(ws == 0); /* the simulated convolution needs none */
    /* The same query again, as PyTorch asks before every call: answered here (cudnn_test.go
     * counts the round trips); a refused one is asked each time. */
    for (int i = 0; i < 3; i++) {
        ws = 99;
        OK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, perf[0].algo, &ws));
        CHECK(ws == 0);
    }
    /* y of the wrong shape is refused. */
    int bad[] = {N, K, P + 1, Q};
    cudnnTensorDescriptor_t bd;
    OK(cudnnCreateTensorDescriptor(&bd));
    OK(cudnnSetTensorNdDescriptor(bd, CUDNN_DATA_FLOAT, 4, bad, ystr));
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, bd, 0, &ws) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, bd, 0, &ws) == CUDNN_STATUS_BAD_PARAM);

    size_t nx = N * C * H * W, nw = K * C * R * S, ny = (size_t)N * K * P * Q;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *y = malloc(ny * 4), *ref = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 7) % 11) - 5;
    for (size_t i = 0; i < nw; i++) w[i] = (float)((i * 5) % 7) * 0.25f - 0.75f;
    for (size_t i = 0; i < ny; i++) y[i] = ref[i] = (float)(i % 3);
    CUdeviceptr dx, dw, dy;
    CHECK(cuMemAlloc(&dx, nx * 4) == CUDA_SUCCESS && cuMemAlloc(&dw, nw * 4) == CUDA_SUCCESS && cuMemAlloc(&dy, ny * 4) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(dx, x, nx * 4) == CUDA_SUCCESS && cuMemcpyHtoD(dw, w, nw * 4) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(dy, y, ny * 4) == CUDA_SUCCESS);
    float alpha = 2, beta = 0.5f;
    OK(cudnnConvolutionForward(h, &alpha, xd, (void *)dx, wd, (void *)dw, cd, perf[0].algo, NULL, 0, &beta, yd, (void *)dy));
    CHECK(cuMemcpyDtoH(y, dy, ny * 4) == CUDA_SUCCESS);
    conv_ref(x, w, ref, N, C, H, W, K, R, S, PAD, STR, P, Q, alpha, beta);
    for (size_t i = 0; i < ny; i++)
        if (fabsf(y[i] - ref[i]) > 1e-4f * (1 + fabsf(ref[i]))) {
            fprintf(stderr, "y[%zu] = %g, want %g\n", i, y[i], ref[i]);
            exit(1);
        }

    /* Backward data is not simulated: sent without waiting, refused at the next synchronisation. */
    OK(cudnnConvolutionBackwardData(h, &alpha, wd, (void *)dw, yd, (void *)dy, cd, 0, NULL, 0, &beta, xd, (void *)dx));
    CHECK(cuCtxSynchronize() == CUDA_ERROR_NOT_SUPPORTED);
    /* A descriptor of the wrong kind is refused here, before anything is sent. */
    CHECK(cudnnConvolutionForward(h, &alpha, (cudnnTensorDescriptor_t)wd, (void *)dx, wd, (void *)dw, cd, 0, NULL, 0, &beta, yd,
                                  (void *)dy) == CUDNN_STATUS_BAD_PARAM);

    cuMemFree(dx);
    cuMemFree(dw);
    cuMemFree(dy);
    free(x), free(w), free(y), free(ref);
    OK(cudnnDestroyTensorDescriptor(xd));
    OK(cudnnDestroyTensorDescriptor(yd));
    OK(cudnnDestroyTensorDescriptor(bd));
    OK(cudnnDestroyFilterDescriptor(wd));
    OK(cudnnDestroyConvolutionDescriptor(cd));
}

static void refusals(cudnnHandle_t h) {
    /* Not forwarded: NOT_SUPPORTED each time, the notice once (cudnn_test.go counts it). */
    cudnnDropoutDescriptor_t dd;
    OK(cudnnCreateDropoutDescriptor(&dd));
    CHECK(cudnnSetDropoutDescriptor(dd, h, 0.5f, NULL, 0, 1) == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK(cudnnSetDropoutDescriptor(dd, h, 0.5f, NULL, 0, 1) == CUDNN_STATUS_NOT_SUPPORTED);
    char msg[256];
    cudnnGetLastErrorString(msg, sizeof msg);
    CHECK(strstr(msg, "cudnnSetDropoutDescriptor") != NULL);
    OK(cudnnDestroyDropoutDescriptor(dd));
    /* Forwarded but not simulated: the simulated backend says so. */
    size_t n;
    CHECK(cudnnDropoutGetStatesSize(h, &n) == CUDNN_STATUS_NOT_SUPPORTED);
    /* A handle that is not one. */
    int bogus[8] = {0};
    CHECK(cudnnSetStream((cudnnHandle_t)bogus, NULL) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnSetStream(NULL, NULL) == CUDNN_STATUS_BAD_PARAM);
}

/* A variant pack is kept in the program (its execution, in backend_api, travels whole; cudnn_test.go
 * counts the frames): read back only once finalized, no attribute after that, pointers and ids
 * that disagree refused at finalize, no execution before it. */
static void pack_execute(cudnnHandle_t h) {
    cudnnBackendDescriptor_t plan, pack, odd;
    OK(cudnnBackendCreateDescriptor(EXECUTION_PLAN, &plan));
    OK(cudnnBackendCreateDescriptor(VARIANT_PACK, &pack));
    void *ptrs[2] = {(void *)0x7f0000001000ull, (void *)0x7f0000002000ull}, *ws = (void *)0x7f0000003000ull, *back[2];
    int64_t uids[2] = {1, 2}, n = 0;
    OK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs));
    OK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids));
    OK(cudnnBackendSetAttribute(pack, 1003 /* WORKSPACE */, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CHECK(cudnnBackendGetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, &n, back) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    OK(cudnnBackendFinalize(pack));
    CHECK(cudnnBackendSetAttribute(pack, ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids) == CUDNN_STATUS_BAD_PARAM);
    OK(cudnnBackendGetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, &n, back));
    CHECK(n == 2 && back[0] == ptrs[0] && back[1] == ptrs[1]);
    CHECK(cudnnBackendGetAttribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_INT64, 2, &n, back) == CUDNN_STATUS_BAD_PARAM);
    OK(cudnnBackendCreateDescriptor(VARIANT_PACK, &odd));
    OK(cudnnBackendSetAttribute(odd, ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs));
    OK(cudnnBackendSetAttribute(odd, ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 1, uids));
    CHECK(cudnnBackendFinalize(odd) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBackendExecute(h, plan, odd) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    /* a pack is no attribute of another descriptor */
    CHECK(cudnnBackendSetAttribute(plan, 1 /* any */, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pack) == CUDNN_STATUS_BAD_PARAM);
    OK(cudnnBackendDestroyDescriptor(odd));
    OK(cudnnBackendDestroyDescriptor(pack));
    OK(cudnnBackendDestroyDescriptor(plan));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        cudnnHandle_t h;
        CHECK(cudnnCreate(&h) != CUDNN_STATUS_SUCCESS);
        printf("dnn_sim_test foreign: OK\n");
        return 0;
    }
    CHECK(cudnnGetVersion() == CUDNN_VERSION);
    int major;
    OK(cudnnGetProperty(MAJOR_VERSION, &major));
    CHECK(major == 9);
    CHECK(strcmp(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED") == 0);
    cudnnHandle_t h;
    OK(cudnnCreate(&h));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
    OK(cudnnSetStream(h, (cudaStream_t)s));
    cudaStream_t back;
    OK(cudnnGetStream(h, &back));
    CHECK(back == (cudaStream_t)s);
    backend_api(h);
    by_value_scalar();
    legacy_conv(h);
    refusals(h);
    pack_execute(h);
    OK(cudnnDestroy(h));
    CHECK(cudnnDestroy(h) == CUDNN_STATUS_BAD_PARAM);
    printf("dnn_sim_test: OK\n");
    return 0;
}

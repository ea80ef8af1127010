/* gpucloud's libcublasLt over the guest libcuda and a real gpuserverd (simulated backend): the
 * calls PyTorch's addmm makes (descriptor, layouts, preference, heuristic, matmul with a bias
 * epilogue) on a cublasLtCreate handle and on a libcublas handle passed as a cuBLASLt one,
 * against a CPU product: float with a transposed A, bfloat16 with bias and GELU, device scalars
 * with beta over a separate C in strided batches; attributes read back (set, and defaults from the
 * worker); refusals (sizes, host objects, handles, shapes); and a failing matmul surfacing at the
 * next synchronisation. Built against testshim/cublasLt.h (a test double of NVIDIA's header). */
#include "../tests/check.h"

#include <cublasLt.h>
#include <math.h>
#include <stdint.h>

#define LT(call)                                                                                         \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)s_);                     \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)
#define EXPECT_LT(call, want)                                                                            \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != (want)) {                                                                              \
            fprintf(stderr, "%s:%d: %s = %d, want %s\n", __FILE__, __LINE__, #call, (int)s_, #want);     \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)

static unsigned seed = 11;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return (float)((int)((seed >> 9) % 17) - 8) / 4; /* multiples of 1/4: exact in bfloat16 */
}

static void *dalloc(size_t n) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, n));
    return (void *)(uintptr_t)p;
}
static void put(void *d, const void *h, size_t n) { CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d, h, n)); }
static void get(void *h, const void *d, size_t n) { CHECK(cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)d, n)); }

static uint16_t f2bf(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7fff + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static double gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

/* addmm does what PyTorch's gemm_and_bias does: D(m x n) = epilogue(op(A) op(B) + bias), column-major,
 * A stored k x m (transposed), B k x n, bias of m; with the heuristic's algo. Types: 0 float, 1 bfloat16. */
static void addmm(cublasLtHandle_t h, int bf16, int m, int n, int k, int32_t epilogue) {
    size_t e = bf16 ? 2 : 4;
    float *A = malloc(sizeof(float) * k * m), *B = malloc(sizeof(float) * k * n), *bias = malloc(sizeof(float) * m);
    for (int i = 0; i < k * m; i++) A[i] = rnd();
    for (int i = 0; i < k * n; i++) B[i] = rnd();
    for (int i = 0; i < m; i++) bias[i] = rnd();
    void *hA = malloc(e * k * m), *hB = malloc(e * k * n), *hbias = malloc(e * m), *hD = malloc(e * m * n);
    for (int i = 0; i < k * m; i++) bf16 ? (void)(((uint16_t *)hA)[i] = f2bf(A[i])) : (void)(((float *)hA)[i] = A[i]);
    for (int i = 0; i < k * n; i++) bf16 ? (void)(((uint16_t *)hB)[i] = f2bf(B[i])) : (void)(((float *)hB)[i] = B[i]);
    for (int i = 0; i < m; i++) bf16 ? (void)(((uint16_t *)hbias)[i] = f2bf(bias[i])) : (void)(((float *)hbias)[i] = bias[i]);
    void *dA = dalloc(e * k * m), *dB = dalloc(e * k * n), *dbias = dalloc(e * m), *dD = dalloc(e * m * n),
         *ws = dalloc(1 << 16);
    put(dA, hA, e * k * m), put(dB, hB, e * k * n), put(dbias, hbias, e * m);

    cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
    cublasLtMatrixLayout_t la, lb, ld;
    LT(cublasLtMatrixLayoutCreate(&la, t, k, m, k));
    LT(cublasLtMatrixLayoutCreate(&lb, t, k, n, k));
    LT(cublasLtMatrixLayoutCreate(&ld, t, m, n, m));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = 1 << 16;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t r[3], again[3];
    int count = 0, count2 = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 3, r, &count));
    EXPECT(count >= 1 && r[0].state == CUBLAS_STATUS_SUCCESS);
    LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 3, again, &count2)); /* answered again, the same */
    EXPECT(count2 == count && memcmp(again[0].algo.data, r[0].algo.data, 64) == 0);
    float alpha = 1, beta = 0;
    LT(cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &beta, dD, ld, dD, ld, &r[0].algo, ws, 1 << 16, NULL));
    get(hD, dD, e * m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += (double)A[l + i * k] * B[l + j * k];
            s += bias[i];
            if (epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) s = gelu(s);
            if (epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) s = s > 0 ? s : 0;
            double g = bf16 ? bf2f(((uint16_t *)hD)[i + j * m]) : ((float *)hD)[i + j * m];
            double tol = bf16 ? 1e-2 * (1 + fabs(s)) : 1e-5 * (1 + fabs(s));
            if (!(fabs(g - s) <= tol)) {
                fprintf(stderr, "addmm %s epilogue %d %dx%dx%d: D(%d,%d) = %g, want %g\n", bf16 ? "bf16" : "f32",
                        epilogue, m, n, k, i, j, g, s);
                exit(1);
            }
        }
    LT(cublasLtMatmulPreferenceDestroy(pref));
    LT(cublasLtMatrixLayoutDestroy(la));
    LT(cublasLtMatrixLayoutDestroy(lb));
    LT(cublasLtMatrixLayoutDestroy(ld));
    LT(cublasLtMatmulDescDestroy(desc));
    void *ps[] = {dA, dB, dbias, dD, ws};
    for (int i = 0; i < 5; i++) CHECK(cuMemFree((CUdeviceptr)(uintptr_t)ps[i]));
    free(A), free(B), free(bias), free(hA), free(hB), free(hbias), free(hD);
}

/* Device scalars (pointer mode DEVICE), beta over a C apart from D, two strided batches, no algo. */
static void device_scalars_batched(cublasLtHandle_t h) {
    enum { M = 3, N = 2, K = 4, NB = 2 };
    float A[NB * M * K], B[NB * K * N], C[NB * M * N], D[NB * M * N], sc[2] = {2, -1};
    for (int i = 0; i < NB * M * K; i++) A[i] = rnd();
    for (int i = 0; i < NB * K * N; i++) B[i] = rnd();
    for (int i = 0; i < NB * M * N; i++) C[i] = rnd();
    float *dA = dalloc(sizeof A), *dB = dalloc(sizeof B), *dC = dalloc(sizeof C), *dD = dalloc(sizeof D), *dS = dalloc(sizeof sc);
    put(dA, A, sizeof A), put(dB, B, sizeof B), put(dC, C, sizeof C), put(dS, sc, sizeof sc);
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    cublasLtMatrixLayout_t l[4];
    int rows[4] = {M, K, M, M}, cols[4] = {K, N, N, N};
    for (int i = 0; i < 4; i++) {
        LT(cublasLtMatrixLayoutCreate(&l[i], CUDA_R_32F, rows[i], cols[i], rows[i]));
        int32_t nb = NB;
        int64_t stride = (int64_t)rows[i] * cols[i];
        LT(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
        LT(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    LT(cublasLtMatmul(h, desc, dS, dA, l[0], dB, l[1], dS + 1, dC, l[2], dD, l[3], NULL, NULL, 0, NULL));
    get(D, dD, sizeof D);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                double s = 0;
                for (int q = 0; q < K; q++) s += (double)A[b * M * K + i + q * M] * B[b * K * N + q + j * K];
                double want = 2 * s - C[b * M * N + i + j * M];
                EXPECT(fabs(D[b * M * N + i + j * M] - want) <= 1e-5 * (1 + fabs(want)));
            }
    for (int i = 0; i < 4; i++) LT(cublasLtMatrixLayoutDestroy(l[i]));
    LT(cublasLtMatmulDescDestroy(desc));
    float *ps[] = {dA, dB, dC, dD, dS};
    for (int i = 0; i < 5; i++) CHECK(cuMemFree((CUdeviceptr)(uintptr_t)ps[i]));
}

/* Attributes: what was set reads back here; a default comes from the worker; sizes are checked. */
static void attributes(void) {
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t v = 0, ta = CUBLAS_OP_T;
    size_t w = 0;
    LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &v, sizeof v, &w));
    EXPECT(v == CUDA_R_32F && w == 4);
    LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, NULL, 0, &w));
    EXPECT(w == 8);
    v = 99;
    LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v, &w)); /* the worker's default */
    EXPECT(v == CUBLAS_OP_N && w == 4);
    uint32_t ep = 0;
    LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep, &w));
    EXPECT(ep == CUBLASLT_EPILOGUE_DEFAULT);
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v, &w));
    EXPECT(v == CUBLAS_OP_T);
    int64_t big = 1;
    EXPECT_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &big, sizeof big), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT(cublasLtMatmulDescSetAttribute(desc, (cublasLtMatmulDescAttributes_t)999, &ta, 4), CUBLAS_STATUS_INVALID_VALUE);
    void *host_obj = &v;
    EXPECT_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, &host_obj, 8),
              CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, 2, &w), CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatrixLayout_t l;
    LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 5, 7, 8));
    uint64_t rows = 0;
    int32_t batch = 0;
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &w));
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch, &w));
    EXPECT(rows == 5 && batch == 1);
    EXPECT_LT(cublasLtMatrixLayoutGetAttribute((cublasLtMatrixLayout_t)desc, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, 8, &w),
              CUBLAS_STATUS_NOT_INITIALIZED); /* a descriptor is not a layout */
    LT(cublasLtMatrixLayoutDestroy(l));
    LT(cublasLtMatmulDescDestroy(desc));
}

/* Refusals: shapes that do not agree (from the worker, at the heuristic), bad handles, and a
 * matmul into memory that is not the session's (at the next synchronisation). */
static void refusals(cublasLtHandle_t h) {
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t a, b, d;
    LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 4, 3, 4));
    LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 5, 2, 5)); /* k 3 against 5 */
    LT(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, 4, 2, 4));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t r;
    int count = -1;
    EXPECT_LT(cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, d, d, pref, 1, &r, &count), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT(cublasLtMatmulAlgoGetHeuristic(h, desc, a, a, d, d, pref, 0, &r, &count), CUBLAS_STATUS_INVALID_VALUE);
    uint64_t forged[4] = {0x67636c68u, 0, 1};
    EXPECT_LT(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)forged, desc, a, b, d, d, pref, 1, &r, &count),
              CUBLAS_STATUS_NOT_INITIALIZED);
    LT(cublasLtMatrixLayoutDestroy(b));
    LT(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 3, 2, 3));
    float one = 1, zero = 0, *dA = dalloc(64), *dB = dalloc(64);
    LT(cublasLtMatmul(h, desc, &one, dA, a, dB, b, &zero, (void *)(uintptr_t)0x10, d, (void *)(uintptr_t)0x10, d, NULL,
                      NULL, 0, NULL));
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS); /* sticky, as on a GPU: last */
    LT(cublasLtMatrixLayoutDestroy(a));
    LT(cublasLtMatrixLayoutDestroy(b));
    LT(cublasLtMatrixLayoutDestroy(d));
    LT(cublasLtMatmulPreferenceDestroy(pref));
    LT(cublasLtMatmulDescDestroy(desc));
}

int main(void) {
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    EXPECT(cublasLtGetVersion() >= 10000);

    cublasLtHandle_t h;
    LT(cublasLtCreate(&h));
    addmm(h, 0, 7, 5, 9, CUBLASLT_EPILOGUE_BIAS);
    addmm(h, 1, 6, 4, 8, CUBLASLT_EPILOGUE_GELU_BIAS);
    device_scalars_batched(h);
    attributes();

    /* PyTorch's way: its cuBLAS handle, cast. */
    cublasHandle_t bh;
    if (cublasCreate(&bh) != CUBLAS_STATUS_SUCCESS) return 1;
    addmm((cublasLtHandle_t)bh, 0, 3, 8, 2, CUBLASLT_EPILOGUE_RELU_BIAS);
    if (cublasDestroy(bh) != CUBLAS_STATUS_SUCCESS) return 1;
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t l;
    LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 1, 1, 1));
    float one = 1;
    EXPECT_LT(cublasLtMatmul((cublasLtHandle_t)bh, desc, &one, NULL, l, NULL, l, &one, NULL, l, NULL, l, NULL, NULL, 0, NULL),
              CUBLAS_STATUS_NOT_INITIALIZED); /* destroyed */
    LT(cublasLtMatrixLayoutDestroy(l));
    LT(cublasLtMatmulDescDestroy(desc));

    refusals(h);
    LT(cublasLtDestroy(h));
    EXPECT_LT(cublasLtDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
    printf("lt_sim_test: OK\n");
    return 0;
}

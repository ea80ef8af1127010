/* gpucloud's libcublas over the guest libcuda and a real gpuserverd (simulated backend): SGEMM and
 * DGEMM in every transpose combination with ragged sizes and padded leading dimensions against a
 * CPU product, beta 0 over NaNs, device pointer mode, strided batches, matrix and vector copies
 * (strided, async on a stream), GemmEx over half, bfloat16, float and double, stream ordering, refused arguments leaving C as it was, destroyed
 * and made-up handles, workspaces, a failing GEMM surfacing at the next synchronisation, and
 * triangular solves (trsm) and batched LU (getrfBatched, getrsBatched); cuBLAS-XT's host-interface
 * GEMM tiled over small blocks, with host and device operands.
 * Built against testshim/cublas_v2.h (a test double of NVIDIA's header).
 *
 * With the argument "foreign" it only checks that cublasCreate refuses a libcuda that is not
 * gpucloud's guest library. */
#include "../tests/check.h"

#include <cublasXt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>

#define BLAS(call)                                                                                       \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                               \
            fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_));     \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)
#define EXPECT_BLAS(call, want)                                                                          \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != (want)) {                                                                              \
            fprintf(stderr, "%s:%d: %s = %s, want %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
                    #want);                                                                              \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)

static unsigned seed = 7;
static double rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return ((seed >> 9) % 2001) / 1000.0 - 1.0;
}

/* op(X)(i, j) of a column-major X with leading dimension ld. */
static double at(const double *x, cublasOperation_t t, int i, int j, int ld) {
    return t == CUBLAS_OP_N ? x[i + (size_t)j * ld] : x[j + (size_t)i * ld];
}

/* reference computes C = alpha op(A) op(B) + beta C in double precision (beta 0: C unread). */
static void reference(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha, const double *A,
                      int lda, const double *B, int ldb, double beta, double *C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += at(A, ta, i, l, lda) * at(B, tb, l, j, ldb);
            C[i + (size_t)j * ldc] = alpha * s + (beta == 0 ? 0 : beta * C[i + (size_t)j * ldc]);
        }
}

static void *dalloc(size_t n) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, n ? n : 1));
    return (void *)(uintptr_t)p;
}

/* gemm_case runs one GEMM of type dbl (0 float, 1 double) through the library and checks it. */
static void gemm_case(cublasHandle_t h, int dbl, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      double alpha, double beta, int nan_c) {
    int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    int lda = ra + 3, ldb = rb + 1, ldc = m + 2; /* padded: lda > rows */
    size_t na = (size_t)lda * ca, nb = (size_t)ldb * cb, nc = (size_t)ldc * n, e = dbl ? 8 : 4;
    double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8), *R = malloc(nc * 8);
    for (size_t i = 0; i < na; i++) A[i] = rnd();
    for (size_t i = 0; i < nb; i++) B[i] = rnd();
    for (size_t i = 0; i < nc; i++) C[i] = R[i] = nan_c ? NAN : rnd();
    reference(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, R, ldc);
    void *dA = dalloc(na * e), *dB = dalloc(nb * e), *dC = dalloc(nc * e);
    float *fa = malloc(na * 4), *fb = malloc(nb * 4), *fc = malloc(nc * 4);
    if (dbl) {
        BLAS(cublasSetMatrix(lda, ca, 8, A, lda, dA, lda));
        BLAS(cublasSetMatrix(ldb, cb, 8, B, ldb, dB, ldb));
        BLAS(cublasSetMatrix(ldc, n, 8, C, ldc, dC, ldc));
        BLAS(cublasDgemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
        BLAS(cublasGetMatrix(ldc, n, 8, dC, ldc, C, ldc));
    } else {
        for (size_t i = 0; i < na; i++) fa[i] = (float)A[i];
        for (size_t i = 0; i < nb; i++) fb[i] = (float)B[i];
        for (size_t i = 0; i < nc; i++) fc[i] = (float)C[i];
        float al = (float)alpha, be = (float)beta;
        BLAS(cublasSetMatrix(lda, ca, 4, fa, lda, dA, lda));
        BLAS(cublasSetMatrix(ldb, cb, 4, fb, ldb, dB, ldb));
        BLAS(cublasSetMatrix(ldc, n, 4, fc, ldc, dC, ldc));
        BLAS(cublasSgemm(h, ta, tb, m, n, k, &al, dA, lda, dB, ldb, &be, dC, ldc));
        BLAS(cublasGetMatrix(ldc, n, 4, dC, ldc, fc, ldc));
        for (size_t i = 0; i < nc; i++) C[i] = fc[i];
    }
    double tol = dbl ? 1e-12 : 1e-5;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++) {
            double g = C[i + (size_t)j * ldc], r = R[i + (size_t)j * ldc];
            if (i >= m) { /* padding rows of C: untouched */
                if (!(isnan(r) ? isnan(g) : fabs(g - r) <= tol * (1 + fabs(r)))) {
                    fprintf(stderr, "padding C(%d,%d) changed: %g, was %g\n", i, j, g, r);
                    exit(1);
                }
                continue;
            }
            if (!(fabs(g - r) <= tol * (1 + fabs(r)))) {
                fprintf(stderr, "%cgemm %d%d %dx%dx%d alpha %g beta %g%s: C(%d,%d) = %g, want %g\n", dbl ? 'D' : 'S', ta, tb,
                        m, n, k, alpha, beta, nan_c ? " (C was NaN)" : "", i, j, g, r);
                exit(1);
            }
        }
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC));
    free(A), free(B), free(C), free(R), free(fa), free(fb), free(fc);
}

/* Refused arguments: the right status, nothing sent, C as it was. */
static void refusals(cublasHandle_t h) {
    float c0[4] = {1, 2, 3, 4}, c[4], one = 1, zero = 0;
    float *d = dalloc(sizeof c0);
    BLAS(cublasSetVector(4, 4, c0, 1, d, 1));
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, &one, d, 2, d, 2, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 1, d, 2, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, d, 2, d, 3, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 2, &one, d, 2, d, 1, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, d, 2, &zero, d, 1), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, (cublasOperation_t)9, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, d, 2, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, NULL, d, 2, d, 2, &zero, d, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, -4, d, 2, 4, &zero, d, 2, 4, 2),
                CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSetMatrix(3, 1, 4, c0, 2, d, 3), CUBLAS_STATUS_INVALID_VALUE); /* lda < rows */
    EXPECT_BLAS(cublasSetVector(2, 4, c0, 0, d, 1), CUBLAS_STATUS_INVALID_VALUE);    /* incx 0 */
    EXPECT_BLAS(cublasSetMathMode(h, (cublasMath_t)42), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSetPointerMode(h, (cublasPointerMode_t)5), CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cuCtxSynchronize()); /* nothing failed on the server either */
    BLAS(cublasGetVector(4, 4, d, 1, c, 1));
    EXPECT(memcmp(c, c0, sizeof c) == 0);
    /* A workspace outside the session's memory is refused by gpuserverd; inside, accepted. */
    EXPECT_BLAS(cublasSetWorkspace(h, (char *)d + 8, 64), CUBLAS_STATUS_INVALID_VALUE);
    BLAS(cublasSetWorkspace(h, d, sizeof c0));
    BLAS(cublasSetWorkspace(h, NULL, 0));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)d));
}

/* GEMM on the handle's non-blocking stream between async copies on it: ordered by the stream alone. */
static void stream_order(cublasHandle_t h) {
    enum { N = 33 };
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    BLAS(cublasSetStream(h, (cudaStream_t)s));
    cudaStream_t got;
    BLAS(cublasGetStream(h, &got));
    EXPECT(got == (cudaStream_t)s);
    static float A[N * N], B[N * N], C[N * N];
    double Ad[N * N], Bd[N * N], R[N * N];
    for (int i = 0; i < N * N; i++) A[i] = (float)(Ad[i] = rnd()), B[i] = (float)(Bd[i] = rnd());
    reference(CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, 1, Ad, N, Bd, N, 0, R, N);
    float *dA = dalloc(sizeof A), *dB = dalloc(sizeof B), *dC = dalloc(sizeof C), one = 1, zero = 0;
    BLAS(cublasSetMatrixAsync(N, N, 4, A, N, dA, N, (cudaStream_t)s));
    BLAS(cublasSetVectorAsync(N * N, 4, B, 1, dB, 1, (cudaStream_t)s));
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dA, N, dB, N, &zero, dC, N));
    BLAS(cublasGetMatrixAsync(N, N, 4, dC, N, C, N, (cudaStream_t)s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < N * N; i++)
        if (fabs(C[i] - R[i]) > 1e-5 * (1 + fabs(R[i]))) {
            fprintf(stderr, "stream-ordered SGEMM: C[%d] = %g, want %g\n", i, C[i], R[i]);
            exit(1);
        }
    BLAS(cublasSetStream(h, NULL));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC));
}

/* Device pointer mode (scalars read from device memory) and strided batches, float and double. */
static void device_scalars_and_batches(cublasHandle_t h) {
    enum { M = 3, K = 2, NB = 3 };
    double A[NB * M * K], B[NB * K], C[NB * M], R[NB * M];
    for (int i = 0; i < NB * M * K; i++) A[i] = rnd();
    for (int i = 0; i < NB * K; i++) B[i] = rnd();
    for (int i = 0; i < NB * M; i++) C[i] = R[i] = rnd();
    double sc[2] = {1.5, -2};
    for (int b = 0; b < NB; b++)
        reference(CUBLAS_OP_N, CUBLAS_OP_N, M, 1, K, sc[0], A + b * M * K, M, B + b * K, K, sc[1], R + b * M, M);
    double *dA = dalloc(sizeof A), *dB = dalloc(sizeof B), *dC = dalloc(sizeof C), *dS = dalloc(sizeof sc);
    BLAS(cublasSetVector(NB * M * K, 8, A, 1, dA, 1));
    BLAS(cublasSetVector(NB * K, 8, B, 1, dB, 1));
    BLAS(cublasSetVector(NB * M, 8, C, 1, dC, 1));
    BLAS(cublasSetVector(2, 8, sc, 1, dS, 1));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    cublasPointerMode_t pm;
    BLAS(cublasGetPointerMode(h, &pm));
    EXPECT(pm == CUBLAS_POINTER_MODE_DEVICE);
    BLAS(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, 1, K, dS, dA, M, M * K, dB, K, K, dS + 1, dC, M, M, NB));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    BLAS(cublasGetVector(NB * M, 8, dC, 1, C, 1));
    for (int i = 0; i < NB * M; i++) EXPECT(fabs(C[i] - R[i]) <= 1e-12 * (1 + fabs(R[i])));
    /* The same batch in float with host scalars; every other element of C read back (incy 2). */
    float fA[NB * M * K], fB[NB * K], fC[NB * M], g[2 * NB * M];
    for (int i = 0; i < NB * M * K; i++) fA[i] = (float)A[i];
    for (int i = 0; i < NB * K; i++) fB[i] = (float)B[i];
    for (int i = 0; i < NB * M; i++) fC[i] = 0;
    float al = 2, be = 0;
    float *fdA = dalloc(sizeof fA), *fdB = dalloc(sizeof fB), *fdC = dalloc(sizeof fC);
    BLAS(cublasSetVector(NB * M * K, 4, fA, 1, fdA, 1));
    BLAS(cublasSetVector(NB * K, 4, fB, 1, fdB, 1));
    BLAS(cublasSetVector(NB * M, 4, fC, 1, fdC, 1));
    BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, 1, K, &al, fdA, M, M * K, fdB, K, K, &be, fdC, M, M, NB));
    memset(g, 0, sizeof g);
    BLAS(cublasGetVector(NB * M, 4, fdC, 1, g, 2));
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < M; i++) {
            double s = 0;
            for (int l = 0; l < K; l++) s += (double)fA[b * M * K + i + l * M] * fB[b * K + l];
            EXPECT(fabs(g[2 * (b * M + i)] - 2 * s) <= 1e-5 * (1 + fabs(2 * s)));
            EXPECT(g[2 * (b * M + i) + 1] == 0);
        }
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dS));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)fdA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)fdB));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)fdC));
}

/* Half and bfloat16 of floats they represent exactly (the values below are multiples of 1/2). */
static uint16_t f2h(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    if (f == 0) return (uint16_t)((b >> 16) & 0x8000);
    return (uint16_t)(((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 112) << 10) | ((b >> 13) & 0x3ff));
}
static float h2f(uint16_t h) {
    if ((h & 0x7fff) == 0) return (h & 0x8000) ? -0.0f : 0.0f;
    uint32_t b = ((uint32_t)(h & 0x8000) << 16) | ((((h >> 10) & 0x1f) + 112u) << 23) | ((uint32_t)(h & 0x3ff) << 13);
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint16_t f2bf(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

/* GemmEx: bfloat16 A and B into float C (compute 32F); half everything under compute 16F (half
 * scalars), strided batched; an integer GEMM the simulated backend refuses, its refusal
 * surfacing at the next synchronisation and not after; refused types. */
/* cublas<t>gemmBatched as batchCUBLAS calls it: the matrices' addresses in device arrays. Evenly
 * spaced (one strided batch) and scattered (one GEMM each, here C in reverse order), each matrix
 * against the CPU's product. */
static void pointer_batches(cublasHandle_t h) {
    enum { M = 4, N = 3, K = 5, NB = 3 };
    double A[NB][M * K], B[NB][K * N], C[NB][M * N], R[NB][M * N];
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < M * K; i++) A[b][i] = rnd();
        for (int i = 0; i < K * N; i++) B[b][i] = rnd();
        for (int i = 0; i < M * N; i++) C[b][i] = R[b][i] = rnd();
        reference(CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, 0.75, A[b], M, B[b], K, -1.25, R[b], M);
    }
    for (int scattered = 0; scattered < 2; scattered++) {
        double *dA = dalloc(sizeof A), *dB = dalloc(sizeof B), *dC = dalloc(sizeof C);
        BLAS(cublasSetVector(NB * M * K, 8, A, 1, dA, 1));
        BLAS(cublasSetVector(NB * K * N, 8, B, 1, dB, 1));
        const double *pa[NB], *pb[NB];
        double *pc[NB];
        for (int b = 0; b < NB; b++) {
            int cb = scattered ? NB - 1 - b : b; /* where matrix b's C lies */
            pa[b] = dA + b * M * K, pb[b] = dB + b * K * N, pc[b] = dC + cb * M * N;
            BLAS(cublasSetVector(M * N, 8, C[b], 1, pc[b], 1));
        }
        void *dp = dalloc(3 * sizeof pa);
        BLAS(cublasSetVector(NB, 8, pa, 1, dp, 1));
        BLAS(cublasSetVector(NB, 8, pb, 1, (char *)dp + sizeof pa, 1));
        BLAS(cublasSetVector(NB, 8, pc, 1, (char *)dp + 2 * sizeof pa, 1));
        double al = 0.75, be = -1.25;
        BLAS(cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &al, (const double *const *)dp, M,
                                (const double *const *)((char *)dp + sizeof pa), K, &be,
                                (double *const *)((char *)dp + 2 * sizeof pa), M, NB));
        for (int b = 0; b < NB; b++) {
            double got[M * N];
            BLAS(cublasGetVector(M * N, 8, pc[b], 1, got, 1));
            for (int i = 0; i < M * N; i++) EXPECT(fabs(got[i] - R[b][i]) <= 1e-12 * (1 + fabs(R[b][i])));
        }
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dp));
    }
    float one = 1;
    EXPECT_BLAS(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, NULL, 2, NULL, 2, &one, NULL, 2, -1),
                CUBLAS_STATUS_INVALID_VALUE);
}

static void gemm_ex(cublasHandle_t h) {
    enum { M = 5, N = 3, K = 4 };
    uint16_t A[M * K], Abf[M * K], B[K * N], Ch[2 * M * N];
    float Af[M * K], Bf[K * N], C[M * N];
    for (int i = 0; i < M * K; i++) Af[i] = (float)((int)(rnd() * 4)) / 2, A[i] = f2h(Af[i]), Abf[i] = f2bf(Af[i]);
    for (int i = 0; i < K * N; i++) Bf[i] = (float)((int)(rnd() * 4)) / 2, B[i] = f2bf(Bf[i]);
    uint16_t *dA = dalloc(sizeof A), *dAbf = dalloc(sizeof Abf), *dB = dalloc(sizeof B), *dH = dalloc(sizeof Ch);
    float *dC = dalloc(sizeof C);
    BLAS(cublasSetVector(M * K, 2, A, 1, dA, 1));
    BLAS(cublasSetVector(M * K, 2, Abf, 1, dAbf, 1));
    BLAS(cublasSetVector(K * N, 2, B, 1, dB, 1));
    float al = 2, be = 0;
    BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &al, dAbf, CUDA_R_16BF, M, dB, CUDA_R_16BF, K, &be, dC,
                      CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    BLAS(cublasGetVector(M * N, 4, dC, 1, C, 1));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float r = 0;
            for (int l = 0; l < K; l++) r += Af[i + l * M] * Bf[l + j * K];
            EXPECT(C[i + j * M] == 2 * r);
        }
    /* Two batches of half A times half B (A shared: stride 0), accumulating onto C of ones. */
    uint16_t B2[K * N], hal = f2h(0.5f), hbe = f2h(1.0f);
    for (int i = 0; i < K * N; i++) B2[i] = f2h(Bf[i]);
    uint16_t *dB2 = dalloc(2 * sizeof B2);
    BLAS(cublasSetVector(K * N, 2, B2, 1, dB2, 1));
    BLAS(cublasSetVector(K * N, 2, B2, 1, dB2 + K * N, 1));
    uint16_t ones[2 * M * N];
    for (int i = 0; i < 2 * M * N; i++) ones[i] = f2h(1);
    BLAS(cublasSetVector(2 * M * N, 2, ones, 1, dH, 1));
    BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &hal, dA, CUDA_R_16F, M, 0, dB2, CUDA_R_16F,
                                    K, K * N, &hbe, dH, CUDA_R_16F, M, M * N, 2, CUBLAS_COMPUTE_16F,
                                    CUBLAS_GEMM_DEFAULT));
    BLAS(cublasGetVector(2 * M * N, 2, dH, 1, Ch, 1));
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < M * N; i++) EXPECT(h2f(Ch[b * M * N + i]) == C[i] / 4 + 1);
    /* SgemmEx: the same bfloat16 product through the float-scalar entry point */
    float *dC2 = dalloc(sizeof C), C2[M * N];
    BLAS(cublasSgemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &al, dAbf, CUDA_R_16BF, M, dB, CUDA_R_16BF, K, &be, dC2,
                       CUDA_R_32F, M));
    BLAS(cublasGetVector(M * N, 4, dC2, 1, C2, 1));
    EXPECT(memcmp(C2, C, sizeof C) == 0);
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC2));
    EXPECT_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &al, dA, (cudaDataType)99, M, dB, CUDA_R_16BF, K, &be,
                             dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &al, dA, CUDA_R_16F, M, dB, CUDA_R_16BF, K, &be, dC,
                             CUDA_R_32F, M, (cublasComputeType_t)12345, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_INVALID_VALUE);
    int ial = 1, ibe = 0;
    BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &ial, dA, CUDA_R_8I, 1, dB, CUDA_R_8I, 1, &ibe, dC,
                      CUDA_R_32I, 1, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_NOT_SUPPORTED); /* the simulated backend's refusal, deferred */
    CHECK(cuCtxSynchronize());                               /* reported once, not sticky */
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dAbf));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB2));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dH));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dC));
}

/* gemv (both operations, strided x and y), dot into device memory, scal with a stride, axpy and
 * copy: remoted as GEMMs over row vectors; against the CPU. */
static void level12(cublasHandle_t h) {
    enum { M = 5, N = 4, LDA = 7, INC = 2 };
    double A[LDA * N], x[INC * M], y[INC * M], y0[INC * M];
    for (int i = 0; i < LDA * N; i++) A[i] = rnd();
    for (int i = 0; i < INC * M; i++) x[i] = rnd(), y0[i] = y[i] = rnd();
    double *dA = dalloc(sizeof A), *dx = dalloc(sizeof x), *dy = dalloc(sizeof y), *dr = dalloc(8);
    BLAS(cublasSetVector(LDA * N, 8, A, 1, dA, 1));
    BLAS(cublasSetVector(INC * M, 8, x, 1, dx, 1));
    for (int t = 0; t < 2; t++) {
        int out = t ? N : M, k = t ? M : N;
        BLAS(cublasSetVector(INC * M, 8, y0, 1, dy, 1));
        double al = 1.5, be = -0.5;
        BLAS(cublasDgemv(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, M, N, &al, dA, LDA, dx, INC, &be, dy, INC));
        BLAS(cublasGetVector(INC * M, 8, dy, 1, y, 1));
        for (int i = 0; i < out; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += (t ? A[l + i * LDA] : A[i + l * LDA]) * x[l * INC];
            double want = al * s + be * y0[i * INC];
            EXPECT(fabs(y[i * INC] - want) <= 1e-12 * (1 + fabs(want)));
            EXPECT(y[i * INC + 1] == y0[i * INC + 1]); /* between the strided elements: untouched */
        }
    }
    float fx[3] = {1, 2, 3}, fy[3] = {4, -5, 6}, fr = 0, *dfx = dalloc(12), *dfy = dalloc(12), *dfr = dalloc(4);
    BLAS(cublasSetVector(3, 4, fx, 1, dfx, 1));
    BLAS(cublasSetVector(3, 4, fy, 1, dfy, 1));
    BLAS(cublasSdot(h, 3, dfx, 1, dfy, 1, &fr)); /* a host result: waits for it */
    EXPECT(fr == 4 - 10 + 18);
    double hd = 0;
    BLAS(cublasDdot(h, M, dx, INC, dx, INC, &hd));
    fr = 0;
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    BLAS(cublasSdot(h, 3, dfx, 1, dfy, 1, dfr));
    double dres;
    BLAS(cublasDdot(h, M, dx, INC, dx, INC, dr));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    BLAS(cublasGetVector(1, 4, dfr, 1, &fr, 1));
    BLAS(cublasGetVector(1, 8, dr, 1, &dres, 1));
    EXPECT(fr == 4 - 10 + 18);
    double xx = 0;
    for (int i = 0; i < M; i++) xx += x[i * INC] * x[i * INC];
    EXPECT(fabs(dres - xx) <= 1e-12 * (1 + xx));
    EXPECT(hd == dres); /* host and device results alike */
    float three = 3;
    BLAS(cublasSscal(h, 2, &three, dfx, 2)); /* elements 0 and 2 */
    BLAS(cublasGetVector(3, 4, dfx, 1, fx, 1));
    EXPECT(fx[0] == 3 && fx[1] == 2 && fx[2] == 9);
    /* axpy with a host alpha and with a device one, strided; copy; fx is {3, 2, 9}, fy {4, -5, 6}. */
    float two = 2, got[3];
    BLAS(cublasSaxpy(h, 2, &two, dfx, 2, dfy, 2)); /* y0 += 2*3, y2 += 2*9 */
    BLAS(cublasGetVector(3, 4, dfy, 1, got, 1));
    EXPECT(got[0] == 10 && got[1] == -5 && got[2] == 24);
    BLAS(cublasSetVector(1, 4, &two, 1, dfr, 1));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    BLAS(cublasSaxpy(h, 3, dfr, dfx, 1, dfy, 1)); /* y += 2 x */
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    BLAS(cublasGetVector(3, 4, dfy, 1, got, 1));
    EXPECT(got[0] == 16 && got[1] == -1 && got[2] == 42);
    BLAS(cublasScopy(h, 3, dfx, 1, dfy, 1));
    BLAS(cublasGetVector(3, 4, dfy, 1, got, 1));
    EXPECT(got[0] == 3 && got[1] == 2 && got[2] == 9);
    double dm = -1;
    BLAS(cublasDaxpy(h, M, &dm, dx, INC, dx, INC)); /* x - x */
    BLAS(cublasDcopy(h, M, dx, INC, dy, 1));
    double back[M];
    BLAS(cublasGetVector(M, 8, dy, 1, back, 1));
    for (int i = 0; i < M; i++) EXPECT(back[i] == 0);
    EXPECT_BLAS(cublasSaxpy(h, 3, NULL, dfx, 1, dfy, 1), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasScopy(h, 3, dfx, 0, dfy, 1), CUBLAS_STATUS_INVALID_VALUE);
    void *ps[] = {dA, dx, dy, dr, dfx, dfy, dfr};
    for (int i = 0; i < 7; i++) CHECK(cuMemFree((CUdeviceptr)(uintptr_t)ps[i]));
}

static int foreign(void) {
    cublasHandle_t h = NULL;
    EXPECT_BLAS(cublasCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT(h == NULL);
    printf("blas_sim_test foreign: OK\n");
    return 0;
}

/* primary_context makes device 0's primary context current, as the runtime does. */
static void primary_context(void) {
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
}

/* "perop": PyTorch's getCurrentCUDABlasHandle before each of 50 SGEMMs (cublasSetStream,
 * cublasSetWorkspace, cublasSetMathMode, each time the same), then a stream alone, which puts the
 * handle back on cuBLAS's own workspace. The Go test counts, with GPUCLOUD_TRACE=1, what reached
 * gpuserverd and whether the caller waited for it. */
static int per_op(void) {
    primary_context();
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    enum { N = 8, OPS = 50 };
    static float A[N * N], B[N * N], C[N * N];
    double Ad[N * N], Bd[N * N], R[N * N];
    for (int i = 0; i < N * N; i++) A[i] = (float)(Ad[i] = rnd()), B[i] = (float)(Bd[i] = rnd());
    reference(CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, 1, Ad, N, Bd, N, 0, R, N);
    float *dA = dalloc(sizeof A), *dB = dalloc(sizeof B), *dC = dalloc(sizeof C), *ws = dalloc(1 << 16), one = 1, zero = 0;
    BLAS(cublasSetMatrix(N, N, 4, A, N, dA, N));
    BLAS(cublasSetMatrix(N, N, 4, B, N, dB, N));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < OPS; i++) {
        BLAS(cublasSetStream(h, (cudaStream_t)s));
        BLAS(cublasSetWorkspace(h, ws, 1 << 16));
        BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
        BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dA, N, dB, N, &zero, dC, N));
    }
    BLAS(cublasSetStream(h, (cudaStream_t)s)); /* cuBLAS's own workspace again: one frame */
    cudaStream_t got;
    BLAS(cublasGetStream(h, &got));
    EXPECT(got == (cudaStream_t)s);
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dA, N, dB, N, &zero, dC, N));
    CHECK(cuStreamSynchronize(s));
    BLAS(cublasGetMatrix(N, N, 4, dC, N, C, N));
    for (int i = 0; i < N * N; i++) EXPECT(fabs(C[i] - R[i]) <= 1e-5 * (1 + fabs(R[i])));
    BLAS(cublasDestroy(h));
    CHECK(cuStreamDestroy(s));
    printf("blas_sim_test: OK\n");
    return 0;
}

/* trsm_case solves op(A) X = alpha B (left) or X op(A) = alpha B (right) through the library with
 * a random triangle (the other triangle NaN: it must not be read; a unit diagonal NaN too) and
 * checks the residual against the right-hand side on the host. */
static void trsm_case(cublasHandle_t h, int dbl, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t t,
                      cublasDiagType_t diag, int m, int n, double alpha) {
    int k = side == CUBLAS_SIDE_LEFT ? m : n, lda = k + 2, ldb = m + 1;
    size_t na = (size_t)lda * k, nb = (size_t)ldb * n, e = dbl ? 8 : 4;
    double *A = malloc(na * 8), *B = malloc(nb * 8), *X = malloc(nb * 8);
    float *f = malloc((na > nb ? na : nb) * 4);
    for (int j = 0; j < k; j++)
        for (int i = 0; i < lda; i++) {
            int in = i < k && (uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j);
            double v = in ? rnd() : NAN;
            if (i == j) v = diag == CUBLAS_DIAG_UNIT ? NAN : 2 + rnd(); /* well conditioned */
            A[i + (size_t)j * lda] = v;
        }
    for (size_t i = 0; i < nb; i++) B[i] = rnd();
    void *dA = dalloc(na * e), *dB = dalloc(nb * e);
    if (dbl) {
        BLAS(cublasSetMatrix(lda, k, 8, A, lda, dA, lda));
        BLAS(cublasSetMatrix(ldb, n, 8, B, ldb, dB, ldb));
        BLAS(cublasDtrsm(h, side, uplo, t, diag, m, n, &alpha, dA, lda, dB, ldb));
        BLAS(cublasGetMatrix(ldb, n, 8, dB, ldb, X, ldb));
    } else {
        float fal = (float)alpha;
        for (size_t i = 0; i < na; i++) f[i] = (float)A[i];
        BLAS(cublasSetMatrix(lda, k, 4, f, lda, dA, lda));
        for (size_t i = 0; i < nb; i++) f[i] = (float)B[i];
        BLAS(cublasSetMatrix(ldb, n, 4, f, ldb, dB, ldb));
        BLAS(cublasStrsm(h, side, uplo, t, diag, m, n, &fal, dA, lda, dB, ldb));
        BLAS(cublasGetMatrix(ldb, n, 4, dB, ldb, f, ldb));
        for (size_t i = 0; i < nb; i++) X[i] = f[i];
    }
    /* T = op(A) as stored (the unread triangle zero, a unit diagonal one). */
    double *T = calloc((size_t)k * k, 8);
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            double v = (uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j) ? A[i + (size_t)j * lda] : 0;
            if (i == j && diag == CUBLAS_DIAG_UNIT) v = 1;
            if (t == CUBLAS_OP_N)
                T[i + (size_t)j * k] = v;
            else
                T[j + (size_t)i * k] = v;
        }
    double tol = dbl ? 1e-10 : 1e-3;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += side == CUBLAS_SIDE_LEFT ? T[i + (size_t)l * k] * X[l + (size_t)j * ldb]
                                              : X[i + (size_t)l * ldb] * T[l + (size_t)j * k];
            double want = alpha * B[i + (size_t)j * ldb];
            if (!(fabs(s - want) <= tol * (1 + fabs(want)))) {
                fprintf(stderr, "trsm dbl %d side %d uplo %d trans %d diag %d: (%d,%d) residual %g vs %g\n", dbl, side,
                        uplo, t, diag, i, j, s, want);
                exit(1);
            }
        }
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    free(A), free(B), free(X), free(f), free(T);
}

/* lu_batched factors three 4x4 matrices with getrfBatched (pointer arrays in device memory, one
 * matrix singular) and solves two right-hand sides of the others with getrsBatched (both
 * operations), checking A X = B on the host, the pivots, info and refused arguments. */
static void lu_batched(cublasHandle_t h) {
    enum { N = 4, LDA = 5, NRHS = 2, LDB = 6, BATCH = 3 };
    for (int op = 0; op < 2; op++) {
        cublasOperation_t t = op ? CUBLAS_OP_T : CUBLAS_OP_N;
        double A[BATCH][LDA * N], B[BATCH][LDB * NRHS], X[BATCH][LDB * NRHS];
        for (int b = 0; b < BATCH; b++) {
            for (int i = 0; i < LDA * N; i++) A[b][i] = rnd();
            for (int i = 0; i < LDB * NRHS; i++) B[b][i] = rnd();
        }
        A[0][0] = 0;                                       /* batch 0: needs a row swap */
        for (int j = 0; j < N; j++) A[2][1 + j * LDA] = 0; /* batch 2: a zero row, singular */
        double *dA[BATCH], *dB[BATCH];
        for (int b = 0; b < BATCH; b++) {
            dA[b] = dalloc(sizeof A[b]);
            dB[b] = dalloc(sizeof B[b]);
            BLAS(cublasSetMatrix(LDA, N, 8, A[b], LDA, dA[b], LDA));
            BLAS(cublasSetMatrix(LDB, NRHS, 8, B[b], LDB, dB[b], LDB));
        }
        double **aarr = dalloc(sizeof dA), **barr = dalloc(sizeof dB);
        int *piv = dalloc(BATCH * N * sizeof(int)), *info = dalloc(BATCH * sizeof(int));
        CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)aarr, dA, sizeof dA));
        CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)barr, dB, sizeof dB));
        BLAS(cublasDgetrfBatched(h, N, aarr, LDA, piv, info, BATCH));
        int hinfo = 99;
        BLAS(cublasDgetrsBatched(h, t, N, NRHS, (const double *const *)aarr, LDA, piv, barr, LDB, &hinfo, 2));
        EXPECT(hinfo == 0);
        int hi[BATCH], hp[BATCH * N];
        CHECK(cuMemcpyDtoH(hi, (CUdeviceptr)(uintptr_t)info, sizeof hi));
        CHECK(cuMemcpyDtoH(hp, (CUdeviceptr)(uintptr_t)piv, sizeof hp));
        EXPECT(hi[0] == 0 && hi[1] == 0 && hi[2] > 0); /* the singular one says where */
        EXPECT(hp[0] >= 2 && hp[0] <= N);               /* A[0](0,0) is 0: another row pivots */
        for (int b = 0; b < 2; b++) {
            BLAS(cublasGetMatrix(LDB, NRHS, 8, dB[b], LDB, X[b], LDB));
            for (int j = 0; j < NRHS; j++)
                for (int i = 0; i < N; i++) {
                    double s = 0;
                    for (int l = 0; l < N; l++)
                        s += (op ? A[b][l + i * LDA] : A[b][i + l * LDA]) * X[b][l + j * LDB];
                    if (!(fabs(s - B[b][i + j * LDB]) < 1e-9 * (1 + fabs(B[b][i + j * LDB])))) {
                        fprintf(stderr, "getrs op %d batch %d (%d,%d): %g, want %g\n", op, b, i, j, s,
                                B[b][i + j * LDB]);
                        exit(1);
                    }
                }
        }
        /* Bad arguments: info names the position, as cuBLAS's. */
        EXPECT_BLAS(cublasDgetrsBatched(h, t, -1, NRHS, (const double *const *)aarr, LDA, piv, barr, LDB, &hinfo, 2),
                    CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(hinfo == -3);
        EXPECT_BLAS(cublasDgetrsBatched(h, t, N, NRHS, (const double *const *)aarr, LDA, piv, barr, 2, &hinfo, 2),
                    CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(hinfo == -9);
        EXPECT_BLAS(cublasDgetrfBatched(h, N, aarr, 2, piv, info, BATCH), CUBLAS_STATUS_INVALID_VALUE);
        for (int b = 0; b < BATCH; b++) {
            CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA[b]));
            CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB[b]));
        }
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)aarr));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)barr));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)piv));
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)info));
    }
}

/* solves: every trsm side, triangle, operation and diagonal in both precisions (host and device
 * alpha), the refusals, and the batched LU. */
static void solves(cublasHandle_t h) {
    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
    for (int dbl = 0; dbl < 2; dbl++)
        for (int side = 0; side < 2; side++)
            for (int uplo = 0; uplo < 2; uplo++)
                for (int o = 0; o < 3; o++)
                    for (int diag = 0; diag < 2; diag++)
                        trsm_case(h, dbl, (cublasSideMode_t)side, (cublasFillMode_t)uplo, ops[o], (cublasDiagType_t)diag,
                                  5, 3, dbl ? -1.5 : 2);
    /* alpha in device memory */
    double *dal = dalloc(8), al = 0.5;
    CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dal, &al, 8));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    double a1 = 4, b1 = 6;
    double *dA = dalloc(8), *dB = dalloc(8);
    CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dA, &a1, 8));
    CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dB, &b1, 8));
    BLAS(cublasDtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 1, 1, dal, dA, 1,
                     dB, 1));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cuMemcpyDtoH(&b1, (CUdeviceptr)(uintptr_t)dB, 8));
    EXPECT(b1 == 0.75); /* 4x = 0.5 * 6 */
    EXPECT_BLAS(cublasDtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 3, 1, &al,
                            dA, 2, dB, 3),
                CUBLAS_STATUS_INVALID_VALUE); /* lda < m */
    EXPECT_BLAS(cublasDtrsm(h, (cublasSideMode_t)5, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 1, 1, &al,
                            dA, 1, dB, 1),
                CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&b1, (CUdeviceptr)(uintptr_t)dB, 8));
    EXPECT(b1 == 0.75); /* refused calls left B as it was */
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dal));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dA));
    CHECK(cuMemFree((CUdeviceptr)(uintptr_t)dB));
    lu_batched(h);
}

/* xt_case: cublasXt{S,D}gemm of host matrices (device ones where dev_b) tiled in blocks of bd,
 * against the CPU product. */
static void xt_case(cublasXtHandle_t x, int dbl, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    int bd, int dev_b) {
    int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    int lda = ra + 1, ldb = rb + 2, ldc = m + 3;
    size_t na = (size_t)lda * ca, nb = (size_t)ldb * cb, nc = (size_t)ldc * n, e = dbl ? 8 : 4;
    double *A = malloc(na * 8), *B = malloc(nb * 8), *C = malloc(nc * 8), *R = malloc(nc * 8);
    for (size_t i = 0; i < na; i++) A[i] = rnd();
    for (size_t i = 0; i < nb; i++) B[i] = rnd();
    for (size_t i = 0; i < nc; i++) C[i] = R[i] = rnd();
    double alpha = 1.5, beta = -0.5;
    reference(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, R, ldc);
    void *a = malloc(na * e), *b = malloc(nb * e), *c = malloc(nc * e);
    for (size_t i = 0; i < na; i++) dbl ? (((double *)a)[i] = A[i]) : (((float *)a)[i] = (float)A[i]);
    for (size_t i = 0; i < nb; i++) dbl ? (((double *)b)[i] = B[i]) : (((float *)b)[i] = (float)B[i]);
    for (size_t i = 0; i < nc; i++) dbl ? (((double *)c)[i] = C[i]) : (((float *)c)[i] = (float)C[i]);
    void *bop = b;
    if (dev_b) {
        bop = dalloc(nb * e);
        CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)bop, b, nb * e));
    }
    BLAS(cublasXtSetBlockDim(x, bd));
    if (dbl) {
        BLAS(cublasXtDgemm(x, ta, tb, m, n, k, &alpha, a, lda, bop, ldb, &beta, c, ldc));
    } else {
        float fa = (float)alpha, fb = (float)beta;
        BLAS(cublasXtSgemm(x, ta, tb, m, n, k, &fa, a, lda, bop, ldb, &fb, c, ldc));
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            size_t o = i + (size_t)j * ldc;
            double got = dbl ? ((double *)c)[o] : ((float *)c)[o];
            EXPECT(fabs(got - R[o]) <= (dbl ? 1e-9 : 1e-3) * (1 + fabs(R[o])));
        }
    /* The padding of C (rows m..ldc) is untouched. */
    for (int j = 0; j < n; j++)
        for (int i = m; i < ldc; i++) {
            size_t o = i + (size_t)j * ldc;
            EXPECT(dbl ? ((double *)c)[o] == C[o] : ((float *)c)[o] == (float)C[o]);
        }
    if (dev_b) CHECK(cuMemFree((CUdeviceptr)(uintptr_t)bop));
    free(A), free(B), free(C), free(R), free(a), free(b), free(c);
}

static void xt(void) {
    cublasXtHandle_t x;
    BLAS(cublasXtCreate(&x));
    float one = 1;
    float hm[4] = {0};
    /* Before a device is chosen there is nothing to run on. */
    EXPECT_BLAS(cublasXtSgemm(x, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, hm, 2, hm, 2, &one, hm, 2),
                CUBLAS_STATUS_NOT_INITIALIZED);
    int bad[] = {7}, dev[] = {0}, boards = 0;
    EXPECT_BLAS(cublasXtDeviceSelect(x, 1, bad), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasXtDeviceSelect(x, 0, dev), CUBLAS_STATUS_INVALID_VALUE);
    BLAS(cublasXtDeviceSelect(x, 1, dev));
    BLAS(cublasXtMaxBoards(&boards));
    EXPECT(boards >= 1);
    EXPECT_BLAS(cublasXtSetBlockDim(x, 0), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasXtSetCpuRatio(x, CUBLASXT_GEMM, CUBLASXT_FLOAT, 0.5f), CUBLAS_STATUS_NOT_SUPPORTED);
    BLAS(cublasXtSetCpuRatio(x, CUBLASXT_GEMM, CUBLASXT_FLOAT, 0));
    /* A leading dimension under the rows is refused and C stays as it was. */
    EXPECT_BLAS(cublasXtSgemm(x, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, hm, 1, hm, 2, &one, hm, 2),
                CUBLAS_STATUS_INVALID_VALUE);
    for (int i = 0; i < 4; i++) EXPECT(hm[i] == 0);
    /* Ragged tiles (blocks of 3 and 4 over 10 x 7 x 5), transposes, host and device operands. */
    xt_case(x, 0, CUBLAS_OP_N, CUBLAS_OP_N, 10, 7, 5, 3, 0);
    xt_case(x, 0, CUBLAS_OP_T, CUBLAS_OP_N, 10, 7, 5, 4, 0);
    xt_case(x, 1, CUBLAS_OP_N, CUBLAS_OP_T, 9, 11, 6, 4, 0);
    xt_case(x, 1, CUBLAS_OP_T, CUBLAS_OP_T, 8, 5, 7, 3, 1);
    xt_case(x, 0, CUBLAS_OP_N, CUBLAS_OP_N, 33, 17, 9, 1024, 1); /* one tile */
    int bd = 0;
    BLAS(cublasXtGetBlockDim(x, &bd));
    EXPECT(bd == 1024);
    BLAS(cublasXtDestroy(x));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) return foreign();
    if (argc > 1 && strcmp(argv[1], "perop") == 0) return per_op();
    primary_context();

    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    int v = 0;
    BLAS(cublasGetVersion(h, &v));
    EXPECT(v >= 10000);
    EXPECT(strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0);
    EXPECT(strlen(cublasGetStatusString(CUBLAS_STATUS_MAPPING_ERROR)) > 0);
    BLAS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    cublasMath_t mm;
    BLAS(cublasGetMathMode(h, &mm));
    EXPECT(mm == CUBLAS_TF32_TENSOR_OP_MATH);
    BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
    for (int dbl = 0; dbl < 2; dbl++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) gemm_case(h, dbl, ops[a], ops[b], 7, 5, 9, 1.25, -0.5, 0);
    gemm_case(h, 0, CUBLAS_OP_T, CUBLAS_OP_N, 31, 17, 23, -2, 0, 1); /* beta 0 over NaN */
    gemm_case(h, 1, CUBLAS_OP_N, CUBLAS_OP_T, 1, 13, 1, 0.5, 0, 1);
    gemm_case(h, 0, CUBLAS_OP_N, CUBLAS_OP_N, 6, 4, 0, 3, 2, 0); /* k 0: C = beta C */
    refusals(h);
    stream_order(h);
    device_scalars_and_batches(h);
    pointer_batches(h);
    gemm_ex(h);
    level12(h);
    solves(h);
    xt();

    /* A function of NVIDIA's API this library does not remote: exported (a program that imports
     * it loads), NOT_SUPPORTED when called, said once on stderr (the Go test counts it). */
    cublasStatus_t (*caxpy)(cublasHandle_t, int, const void *, const void *, int, void *, int) =
        (__typeof__(caxpy))dlsym(RTLD_DEFAULT, "cublasCaxpy_v2");
    EXPECT(caxpy != NULL);
    for (int i = 0; i < 2; i++) EXPECT_BLAS(caxpy(h, 1, NULL, NULL, 1, NULL, 1), CUBLAS_STATUS_NOT_SUPPORTED);
    size_t (*cudart)(void) = (__typeof__(cudart))dlsym(RTLD_DEFAULT, "cublasGetCudartVersion");
    EXPECT(cudart && cudart() >= 13000);

    /* Handles: a destroyed one, a made-up one and NULL are refused. */
    cublasHandle_t h2;
    BLAS(cublasCreate(&h2));
    BLAS(cublasDestroy(h2));
    float one = 1;
    EXPECT_BLAS(cublasSgemm(h2, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, NULL, 1, NULL, 1, &one, NULL, 1),
                CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_BLAS(cublasDestroy(h2), CUBLAS_STATUS_NOT_INITIALIZED);
    uint64_t forged[8] = {0x67636273u, 0, 1};
    EXPECT_BLAS(cublasSetStream((cublasHandle_t)forged, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_BLAS(cublasGetVersion(NULL, &v), CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_BLAS(cublasCreate(NULL), CUBLAS_STATUS_INVALID_VALUE);

    /* A GEMM whose output is not device memory is accepted at issue, like a launch, and fails
     * when it runs: the error comes back at the next synchronisation (sticky, as on a GPU). */
    float *dA = dalloc(16);
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, dA, 2, dA, 2, &one, (float *)(uintptr_t)0x10, 2));
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    BLAS(cublasDestroy(h));
    printf("blas_sim_test: OK\n");
    return 0;
}

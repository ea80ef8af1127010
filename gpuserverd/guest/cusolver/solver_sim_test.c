/* solver_sim_test: gpucloud's libcusolver.so.12 over the guest libcuda and a real gpuserverd on
 * the simulated backend (guesttest/cusolver_test.go). A double LU factorisation and solve checked
 * against the known solution, a singular matrix's devInfo, a float symmetric eigen-solve checked
 * by A v = w v, streams, handles and refusals; a sparse system solved by cusolverSp's host
 * solvers, whose host arrays travel staged through device memory. With "foreign" it only checks that
 * cusolverDnCreate fails over another libcuda. Declares the cuSOLVER functions it uses (CI has no
 * cusolverDn.h). */
#include <cuda.h>
#include <math.h>
#include <string.h>

#include "gc_test_check.h"

typedef int cusolverStatus_t;
typedef int cudaDataType;
typedef CUstream cudaStream_t;
typedef struct cusolverDnHandle *cusolverDnHandle_t;
typedef struct cusolverDnParams *cusolverDnParams_t;
typedef struct syevjInfo *syevjInfo_t;
typedef struct cusolverDnIRSParams *cusolverDnIRSParams_t;
cusolverStatus_t cusolverGetVersion(int *version);
cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h);
cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h);
cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s);
cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t h, cudaStream_t *s);
cusolverStatus_t cusolverDnDgetrf_bufferSize(cusolverDnHandle_t h, int m, int n, double *A, int lda, int *lwork);
cusolverStatus_t cusolverDnDgetrf(cusolverDnHandle_t h, int m, int n, double *A, int lda, double *work, int *ipiv, int *info);
cusolverStatus_t cusolverDnDgetrs(cusolverDnHandle_t h, int trans, int n, int nrhs, const double *A, int lda,
                                  const int *ipiv, double *B, int ldb, int *info);
cusolverStatus_t cusolverDnSsyevd_bufferSize(cusolverDnHandle_t h, int jobz, int uplo, int n, const float *A, int lda,
                                             const float *W, int *lwork);
cusolverStatus_t cusolverDnSsyevd(cusolverDnHandle_t h, int jobz, int uplo, int n, float *A, int lda, float *W,
                                  float *work, int lwork, int *info);
cusolverStatus_t cusolverDnCreateParams(cusolverDnParams_t *p);
cusolverStatus_t cusolverDnDestroyParams(cusolverDnParams_t p);
cusolverStatus_t cusolverDnCreateSyevjInfo(syevjInfo_t *j);
cusolverStatus_t cusolverDnDestroySyevjInfo(syevjInfo_t j);
cusolverStatus_t cusolverDnXsyevjSetTolerance(syevjInfo_t j, double tol);
cusolverStatus_t cusolverDnXgeqrf_bufferSize(cusolverDnHandle_t h, cusolverDnParams_t p, int64_t m, int64_t n,
                                             cudaDataType ta, const void *A, int64_t lda, cudaDataType tt,
                                             const void *tau, cudaDataType ct, size_t *dev, size_t *host);
cusolverStatus_t cusolverDnIRSParamsCreate(cusolverDnIRSParams_t *p);
typedef struct cusolverSpHandle *cusolverSpHandle_t;
typedef void *cusparseMatDescr_t;
cusolverStatus_t cusolverSpCreate(cusolverSpHandle_t *h);
cusolverStatus_t cusolverSpDestroy(cusolverSpHandle_t h);
cusolverStatus_t cusolverSpSetStream(cusolverSpHandle_t h, cudaStream_t s);
cusolverStatus_t cusolverSpGetStream(cusolverSpHandle_t h, cudaStream_t *s);
cusolverStatus_t cusolverSpDcsrlsvluHost(cusolverSpHandle_t h, int n, int nnz, const cusparseMatDescr_t d, const double *val,
                                         const int *rowPtr, const int *colInd, const double *b, double tol, int reorder,
                                         double *x, int *singularity);
cusolverStatus_t cusolverSpScsrlsvqrHost(cusolverSpHandle_t h, int m, int nnz, const cusparseMatDescr_t d, const float *val,
                                         const int *rowPtr, const int *colInd, const float *b, float tol, int reorder,
                                         float *x, int *singularity);
cusolverStatus_t cusolverSpDcsreigsHost(void);
int cusparseCreateMatDescr(cusparseMatDescr_t *d);
int cusparseDestroyMatDescr(cusparseMatDescr_t d);
int cusparseSetMatIndexBase(cusparseMatDescr_t d, int base);

enum { NOT_INITIALIZED = 1, NOT_SUPPORTED = 9, EIG_MODE_VECTOR = 1, FILL_LOWER = 0, OP_N = 0 };

static CUdeviceptr put(const void *host, size_t n) {
    CUdeviceptr d;
    CU(cuMemAlloc(&d, n));
    CU(cuMemcpyHtoD(d, host, n));
    return d;
}

static int devinfo(CUdeviceptr info) {
    int v = -1;
    CU(cuMemcpyDtoH(&v, info, sizeof v));
    return v;
}

/* A x = b for a 3x3 double matrix (column-major), through getrf and getrs on a stream. */
static void lu(cusolverDnHandle_t h, cudaStream_t s) {
    const double A[9] = {4, 2, 1, -2, 5, 3, 1, -1, 6}; /* columns */
    const double x[3] = {1, -2, 3};
    double b[3];
    for (int i = 0; i < 3; i++) b[i] = A[i] * x[0] + A[i + 3] * x[1] + A[i + 6] * x[2];
    CUdeviceptr dA = put(A, sizeof A), dB = put(b, sizeof b), ipiv, info;
    CU(cuMemAlloc(&ipiv, 3 * sizeof(int)));
    CU(cuMemAlloc(&info, sizeof(int)));
    int lwork = -1;
    OK(cusolverDnDgetrf_bufferSize(h, 3, 3, (double *)dA, 3, &lwork));
    CHECK(lwork >= 0);
    CUdeviceptr work;
    CU(cuMemAlloc(&work, (size_t)(lwork + 1) * sizeof(double)));
    OK(cusolverDnDgetrf(h, 3, 3, (double *)dA, 3, (double *)work, (int *)ipiv, (int *)info));
    OK(cusolverDnDgetrs(h, OP_N, 3, 1, (double *)dA, 3, (const int *)ipiv, (double *)dB, 3, (int *)info));
    CU(cuStreamSynchronize((CUstream)s));
    CHECK(devinfo(info) == 0);
    double got[3];
    CU(cuMemcpyDtoH(got, dB, sizeof got));
    for (int i = 0; i < 3; i++) {
        if (fabs(got[i] - x[i]) > 1e-12) {
            fprintf(stderr, "x[%d] = %.17g, want %g\n", i, got[i], x[i]);
            exit(1);
        }
    }
    /* A singular matrix: devInfo names the first zero pivot, as LAPACK's getrf. */
    const double S[9] = {1, 2, 3, 2, 4, 6, 0, 1, 1};
    CU(cuMemcpyHtoD(dA, S, sizeof S));
    OK(cusolverDnDgetrf(h, 3, 3, (double *)dA, 3, (double *)work, (int *)ipiv, (int *)info));
    CU(cuStreamSynchronize((CUstream)s));
    CHECK(devinfo(info) > 0);
    CU(cuMemFree(dA));
    CU(cuMemFree(dB));
    CU(cuMemFree(ipiv));
    CU(cuMemFree(info));
    CU(cuMemFree(work));
}

/* The eigenvalues (ascending) and eigenvectors of a symmetric 4x4 float matrix: A v = w v. */
static void eigen(cusolverDnHandle_t h, cudaStream_t s) {
    const int n = 4;
    float A[16];
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) A[i + j * n] = (float)(1.0 / (1 + i + j)) + (i == j ? (float)i : 0); /* Hilbert + diag */
    CUdeviceptr dA = put(A, sizeof A), W, info;
    CU(cuMemAlloc(&W, n * sizeof(float)));
    CU(cuMemAlloc(&info, sizeof(int)));
    int lwork = -1;
    OK(cusolverDnSsyevd_bufferSize(h, EIG_MODE_VECTOR, FILL_LOWER, n, (const float *)dA, n, (const float *)W, &lwork));
    CUdeviceptr work;
    CU(cuMemAlloc(&work, (size_t)(lwork + 1) * sizeof(float)));
    OK(cusolverDnSsyevd(h, EIG_MODE_VECTOR, FILL_LOWER, n, (float *)dA, n, (float *)W, (float *)work, lwork, (int *)info));
    CU(cuStreamSynchronize((CUstream)s));
    CHECK(devinfo(info) == 0);
    float w[4], V[16];
    CU(cuMemcpyDtoH(w, W, sizeof w));
    CU(cuMemcpyDtoH(V, dA, sizeof V));
    for (int k = 0; k < n; k++) {
        if (k > 0) CHECK(w[k] >= w[k - 1]);
        double norm = 0;
        for (int i = 0; i < n; i++) {
            double av = 0;
            for (int j = 0; j < n; j++) av += A[i + j * n] * V[j + k * n];
            CHECK(fabs(av - w[k] * V[i + k * n]) < 1e-4);
            norm += V[i + k * n] * V[i + k * n];
        }
        CHECK(fabs(norm - 1) < 1e-4);
    }
    CU(cuMemFree(dA));
    CU(cuMemFree(W));
    CU(cuMemFree(info));
    CU(cuMemFree(work));
}

/* A 4x4 sparse system (one-based CSR) solved by cusolverSp's host LU and QR: the matrix, b and x
 * are host arrays the guest stages through device memory; x comes back. A zero row is singular. */
static void sparse(cudaStream_t s) {
    cusolverSpHandle_t h;
    OK(cusolverSpCreate(&h));
    OK(cusolverSpSetStream(h, s));
    cudaStream_t got = NULL;
    OK(cusolverSpGetStream(h, &got));
    CHECK(got == s);
    cusparseMatDescr_t d;
    OK(cusparseCreateMatDescr(&d));
    OK(cusparseSetMatIndexBase(d, 1));
    /* [[4 1 0 0] [1 4 1 0] [0 1 4 1] [0 0 1 3]] */
    const int rowPtr[5] = {1, 3, 6, 9, 11}, colInd[10] = {1, 2, 1, 2, 3, 2, 3, 4, 3, 4};
    const double val[10] = {4, 1, 1, 4, 1, 1, 4, 1, 1, 3};
    const double want[4] = {1, -1, 2, 0.5};
    double b[4] = {0}, x[4] = {0};
    for (int i = 0; i < 4; i++)
        for (int k = rowPtr[i] - 1; k < rowPtr[i + 1] - 1; k++) b[i] += val[k] * want[colInd[k] - 1];
    int sing = 7;
    OK(cusolverSpDcsrlsvluHost(h, 4, 10, d, val, rowPtr, colInd, b, 1e-12, 0, x, &sing));
    CHECK(sing == -1);
    for (int i = 0; i < 4; i++) CHECK(fabs(x[i] - want[i]) < 1e-12);
    float valf[10], bf[4], xf[4] = {0};
    for (int k = 0; k < 10; k++) valf[k] = (float)val[k];
    for (int i = 0; i < 4; i++) bf[i] = (float)b[i];
    OK(cusolverSpScsrlsvqrHost(h, 4, 10, d, valf, rowPtr, colInd, bf, 1e-6f, 0, xf, &sing));
    CHECK(sing == -1);
    for (int i = 0; i < 4; i++) CHECK(fabs(xf[i] - want[i]) < 1e-5);
    const int rowPtrS[5] = {1, 3, 6, 6, 8}, colIndS[7] = {1, 2, 1, 2, 3, 3, 4}; /* row 3 empty */
    OK(cusolverSpDcsrlsvluHost(h, 4, 7, d, val, rowPtrS, colIndS, b, 1e-12, 0, x, &sing));
    CHECK(sing >= 0);
    /* Refused: complex corners by value; a destroyed handle. */
    CHECK(cusolverSpDcsreigsHost() == NOT_SUPPORTED);
    OK(cusparseDestroyMatDescr(d));
    OK(cusolverSpDestroy(h));
    CHECK(cusolverSpDcsrlsvluHost(h, 4, 10, d, val, rowPtr, colInd, b, 1e-12, 0, x, &sing) == NOT_INITIALIZED);
}

int main(int argc, char **argv) {
    cusolverDnHandle_t h = NULL;
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        CHECK(cusolverDnCreate(&h) == NOT_INITIALIZED);
        printf("solver_sim_test foreign: OK\n");
        return 0;
    }
    int v = 0;
    OK(cusolverGetVersion(&v));
    CHECK(v == 12004);
    CU(cuInit(0));
    OK(cusolverDnCreate(&h));
    CHECK(h != NULL);
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    cudaStream_t got = (cudaStream_t)1;
    OK(cusolverDnGetStream(h, &got));
    CHECK(got == NULL);
    OK(cusolverDnSetStream(h, (cudaStream_t)s));
    OK(cusolverDnGetStream(h, &got));
    CHECK(got == (cudaStream_t)s);

    lu(h, (cudaStream_t)s);
    eigen(h, (cudaStream_t)s);
    sparse((cudaStream_t)s);

    /* Objects: params and infos are made and destroyed on the server too. */
    cusolverDnParams_t p;
    syevjInfo_t j;
    OK(cusolverDnCreateParams(&p));
    OK(cusolverDnCreateSyevjInfo(&j));
    OK(cusolverDnXsyevjSetTolerance(j, 1e-7));
    OK(cusolverDnDestroySyevjInfo(j));
    OK(cusolverDnDestroyParams(p));
    /* NULL params are NVIDIA's default algorithms (PyTorch's QR and eigh pass NULL): the call
     * reaches the server, whose simulated backend does not compute the 64-bit API and says so;
     * NULL params as the object a function works on stay refused. */
    size_t dev_bytes = 0, host_bytes = 0;
    cudaDataType r64 = (cudaDataType)1; /* CUDA_R_64F */
    CHECK(cusolverDnXgeqrf_bufferSize(h, NULL, 4, 3, r64, NULL, 4, r64, NULL, r64, &dev_bytes, &host_bytes) == NOT_SUPPORTED);
    CHECK(cusolverDnDestroyParams(NULL) == NOT_INITIALIZED);

    /* Refusals: a function not remoted, twice (one notice); a NULL handle; a destroyed one. */
    cusolverDnIRSParams_t irs;
    CHECK(cusolverDnIRSParamsCreate(&irs) == NOT_SUPPORTED);
    CHECK(cusolverDnIRSParamsCreate(&irs) == NOT_SUPPORTED);
    int lwork;
    CHECK(cusolverDnDgetrf_bufferSize(NULL, 3, 3, NULL, 3, &lwork) == NOT_INITIALIZED);
    OK(cusolverDnDestroy(h));
    CHECK(cusolverDnDgetrf_bufferSize(h, 3, 3, NULL, 3, &lwork) == NOT_INITIALIZED);
    CU(cuStreamDestroy(s));
    printf("solver_sim_test: OK\n");
    return 0;
}

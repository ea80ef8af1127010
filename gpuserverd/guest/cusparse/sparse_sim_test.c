/* sparse_sim_test: gpucloud's libcusparse.so.12 over the guest libcuda and a real gpuserverd on
 * the simulated backend (guesttest/mathlibs_test.go): a CSR SpMV with host and with device scalars
 * and a CSR SpMM on a stream, checked against the CPU; descriptors read back; a matrix descriptor's
 * settings; a bad descriptor and a refused call; the legacy incomplete LU (csrilu02) of a
 * tridiagonal matrix, whose ILU(0) is its exact LU. Declares the cuSPARSE functions it uses (CI has
 * no cusparse.h). */
#include <cuda.h>
#include <math.h>
#include <string.h>

#include "gc_test_check.h"

typedef void *H;
enum {
    INVALID_VALUE = 3, NOT_SUPPORTED = 10, R_32F = 0, INDEX_32I = 2, BASE_ZERO = 0, NON_TRANSPOSE = 0, ORDER_COL = 1,
    POINTER_HOST = 0, POINTER_DEVICE = 1, SPMV_DEFAULT = 0, SPMM_DEFAULT = 0
};
int cusparseCreate(H *h);
int cusparseDestroy(H h);
int cusparseSetStream(H h, void *s);
int cusparseGetStream(H h, void **s);
int cusparseSetPointerMode(H h, int mode);
int cusparseGetPointerMode(H h, int *mode);
int cusparseCreateCsr(H *m, int64_t rows, int64_t cols, int64_t nnz, void *off, void *col, void *val, int offType,
                      int colType, int base, int valType);
int cusparseCreateDnVec(H *v, int64_t size, void *val, int type);
int cusparseCreateDnMat(H *m, int64_t rows, int64_t cols, int64_t ld, void *val, int type, int order);
int cusparseDestroySpMat(H m);
int cusparseDestroyDnVec(H v);
int cusparseDestroyDnMat(H m);
int cusparseSpMatGetSize(H m, int64_t *rows, int64_t *cols, int64_t *nnz);
int cusparseSpMV_bufferSize(H h, int op, const void *alpha, H a, H x, const void *beta, H y, int ct, int alg, size_t *sz);
int cusparseSpMV(H h, int op, const void *alpha, H a, H x, const void *beta, H y, int ct, int alg, void *buf);
int cusparseSpMM_bufferSize(H h, int opA, int opB, const void *alpha, H a, H b, const void *beta, H c, int ct, int alg,
                            size_t *sz);
int cusparseSpMM(H h, int opA, int opB, const void *alpha, H a, H b, const void *beta, H c, int ct, int alg, void *buf);
int cusparseSpVV(H h, int op, H x, H y, void *result, int ct, void *buf);
int cusparseCreateMatDescr(H *d);
int cusparseSetMatIndexBase(H d, int base);
int cusparseGetMatIndexBase(H d);
int cusparseDestroyMatDescr(H d);
const char *cusparseGetErrorName(int status);
int cusparseCreateCsrilu02Info(H *info);
int cusparseDestroyCsrilu02Info(H info);
int cusparseDcsrilu02_bufferSize(H h, int m, int nnz, H d, double *val, const int *off, const int *col, H info, int *bytes);
int cusparseDcsrilu02_analysis(H h, int m, int nnz, H d, const double *val, const int *off, const int *col, H info,
                               int policy, void *buf);
int cusparseDcsrilu02(H h, int m, int nnz, H d, double *val, const int *off, const int *col, H info, int policy,
                      void *buf);

/* A 4x5 matrix with 7 stored elements. */
enum { ROWS = 4, COLS = 5, NNZ = 7, K = 3 };
static const int off[ROWS + 1] = {0, 2, 3, 5, 7}, col[NNZ] = {0, 3, 1, 2, 4, 0, 4};
static const float val[NNZ] = {1, 2, -3, 4, 0.5f, -1, 6};

static CUdeviceptr upload(const void *p, size_t n) {
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(d, p, n) == CUDA_SUCCESS);
    return d;
}

/* spmv checks y = alpha*A*x + beta*y for y's start of all ones, the scalars given as they are. */
static void spmv(H h, H a, const void *alpha, const void *beta, float fa, float fb) {
    float x[COLS] = {1, -2, 3, 0.5f, 4}, y[ROWS] = {1, 1, 1, 1}, want[ROWS];
    for (int r = 0; r < ROWS; r++) {
        double s = 0;
        for (int k = off[r]; k < off[r + 1]; k++) s += val[k] * x[col[k]];
        want[r] = fa * s + fb * 1;
    }
    CUdeviceptr dx = upload(x, sizeof x), dy = upload(y, sizeof y);
    H vx, vy;
    OK(cusparseCreateDnVec(&vx, COLS, (void *)dx, R_32F));
    OK(cusparseCreateDnVec(&vy, ROWS, (void *)dy, R_32F));
    size_t sz = 99;
    OK(cusparseSpMV_bufferSize(h, NON_TRANSPOSE, alpha, a, vx, beta, vy, R_32F, SPMV_DEFAULT, &sz));
    CUdeviceptr buf = 0;
    if (sz) CHECK(cuMemAlloc(&buf, sz) == CUDA_SUCCESS);
    OK(cusparseSpMV(h, NON_TRANSPOSE, alpha, a, vx, beta, vy, R_32F, SPMV_DEFAULT, (void *)buf));
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    CHECK(cuMemcpyDtoH(y, dy, sizeof y) == CUDA_SUCCESS);
    for (int r = 0; r < ROWS; r++) CHECK(fabsf(y[r] - want[r]) < 1e-5f);
    OK(cusparseDestroyDnVec(vx));
    OK(cusparseDestroyDnVec(vy));
}

/* C = A*B for a column-major 5x3 B, on the handle's stream. */
static void spmm(H h, H a) {
    float b[COLS * K], c[ROWS * K], want[ROWS * K] = {0};
    for (int i = 0; i < COLS * K; i++) b[i] = (float)(i % 4) - 1.5f;
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < K; j++)
            for (int k = off[r]; k < off[r + 1]; k++) want[j * ROWS + r] += val[k] * b[j * COLS + col[k]];
    CUdeviceptr db = upload(b, sizeof b), dc;
    CHECK(cuMemAlloc(&dc, sizeof c) == CUDA_SUCCESS);
    H mb, mc;
    OK(cusparseCreateDnMat(&mb, COLS, K, COLS, (void *)db, R_32F, ORDER_COL));
    OK(cusparseCreateDnMat(&mc, ROWS, K, ROWS, (void *)dc, R_32F, ORDER_COL));
    float one = 1, zero = 0;
    size_t sz;
    OK(cusparseSpMM_bufferSize(h, NON_TRANSPOSE, NON_TRANSPOSE, &one, a, mb, &zero, mc, R_32F, SPMM_DEFAULT, &sz));
    OK(cusparseSpMM(h, NON_TRANSPOSE, NON_TRANSPOSE, &one, a, mb, &zero, mc, R_32F, SPMM_DEFAULT, NULL));
    void *s;
    OK(cusparseGetStream(h, &s));
    CHECK(cuStreamSynchronize((CUstream)s) == CUDA_SUCCESS);
    CHECK(cuMemcpyDtoH(c, dc, sizeof c) == CUDA_SUCCESS);
    for (int i = 0; i < ROWS * K; i++) CHECK(fabsf(c[i] - want[i]) < 1e-5f);
    OK(cusparseDestroyDnMat(mb));
    OK(cusparseDestroyDnMat(mc));
}

/* ilu: ILU(0) of the tridiagonal matrix (4 on the diagonal, -1 beside it), whose pattern holds its
 * exact LU: L's and U's entries from the recurrence u_i = 4 - 1/u_{i-1}. */
static void ilu(H h) {
    enum { M = 6, NZ = 3 * M - 2 };
    int off[M + 1], col[NZ];
    double val[NZ];
    int k = 0;
    for (int i = 0; i < M; i++) {
        off[i] = k;
        for (int j = i - 1; j <= i + 1; j++)
            if (j >= 0 && j < M) col[k] = j, val[k++] = j == i ? 4 : -1;
    }
    off[M] = k;
    CUdeviceptr doff = upload(off, sizeof off), dcol = upload(col, sizeof col), dval = upload(val, sizeof val);
    H d, info;
    OK(cusparseCreateMatDescr(&d));
    OK(cusparseCreateCsrilu02Info(&info));
    int bytes = 0;
    OK(cusparseDcsrilu02_bufferSize(h, M, NZ, d, (double *)dval, (int *)doff, (int *)dcol, info, &bytes));
    CHECK(bytes > 0);
    CUdeviceptr buf;
    CHECK(cuMemAlloc(&buf, (size_t)bytes) == CUDA_SUCCESS);
    /* The factorisation before its analysis is refused, and the values stay as they were. */
    CHECK(cusparseDcsrilu02(h, M, NZ, d, (double *)dval, (int *)doff, (int *)dcol, info, 0, (void *)buf) == INVALID_VALUE);
    OK(cusparseDcsrilu02_analysis(h, M, NZ, d, (double *)dval, (int *)doff, (int *)dcol, info, 0, (void *)buf));
    OK(cusparseDcsrilu02(h, M, NZ, d, (double *)dval, (int *)doff, (int *)dcol, info, 0, (void *)buf));
    double got[NZ];
    CHECK(cuMemcpyDtoH(got, dval, sizeof got) == CUDA_SUCCESS);
    double u = 4;
    for (int i = 0; i < M; i++) {
        if (i > 0) {
            double l = -1 / u; /* L(i, i-1) */
            u = 4 + l;         /* 4 - l * U(i-1, i), U(i-1, i) = -1 */
            CHECK(fabs(got[off[i]] - l) < 1e-12);
        }
        CHECK(fabs(got[off[i] + (i > 0)] - u) < 1e-12);
        if (i + 1 < M) CHECK(got[off[i] + (i > 0) + 1] == -1); /* U above the diagonal: A's */
    }
    OK(cusparseDestroyCsrilu02Info(info));
    CHECK(cusparseDestroyCsrilu02Info(info) != 0);
    OK(cusparseDestroyMatDescr(d));
    CHECK(cuMemFree(buf) == CUDA_SUCCESS);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        H h;
        CHECK(cusparseCreate(&h) != 0);
        printf("sparse_sim_test foreign: OK\n");
        return 0;
    }
    GC_TEST_CONTEXT();
    H h;
    OK(cusparseCreate(&h));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
    OK(cusparseSetStream(h, s));
    CUdeviceptr doff = upload(off, sizeof off), dcol = upload(col, sizeof col), dval = upload(val, sizeof val);
    H a;
    OK(cusparseCreateCsr(&a, ROWS, COLS, NNZ, (void *)doff, (void *)dcol, (void *)dval, INDEX_32I, INDEX_32I, BASE_ZERO, R_32F));
    int64_t r, c, n;
    OK(cusparseSpMatGetSize(a, &r, &c, &n));
    CHECK(r == ROWS && c == COLS && n == NNZ);

    float alpha = 2, beta = 1; /* host scalars, the default pointer mode */
    spmv(h, a, &alpha, &beta, 2, 1);
    float dev[2] = {-0.5f, 3};
    CUdeviceptr dscal = upload(dev, sizeof dev);
    OK(cusparseSetPointerMode(h, POINTER_DEVICE));
    int mode;
    OK(cusparseGetPointerMode(h, &mode));
    CHECK(mode == POINTER_DEVICE);
    spmv(h, a, (void *)dscal, (void *)(dscal + 4), -0.5f, 3);
    OK(cusparseSetPointerMode(h, POINTER_HOST));
    spmm(h, a);

    H md;
    OK(cusparseCreateMatDescr(&md));
    CHECK(cusparseGetMatIndexBase(md) == BASE_ZERO);
    OK(cusparseSetMatIndexBase(md, 1));
    CHECK(cusparseGetMatIndexBase(md) == 1);
    OK(cusparseDestroyMatDescr(md));

    size_t sz;
    CHECK(cusparseSpMV_bufferSize(h, NON_TRANSPOSE, &alpha, (H)0x1234, (H)0x5678, &beta, (H)0x9abc, R_32F, 0, &sz) == INVALID_VALUE);
    CHECK(cusparseSpVV(h, 0, NULL, NULL, NULL, R_32F, NULL) == NOT_SUPPORTED);
    CHECK(cusparseSpVV(h, 0, NULL, NULL, NULL, R_32F, NULL) == NOT_SUPPORTED);
    CHECK(strcmp(cusparseGetErrorName(NOT_SUPPORTED), "CUSPARSE_STATUS_NOT_SUPPORTED") == 0);
    ilu(h);
    OK(cusparseDestroySpMat(a));
    OK(cusparseDestroy(h));
    CHECK(cusparseSetStream(h, NULL) != 0);
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    printf("sparse_sim_test: OK\n");
    return 0;
}

/* cuBLAS-XT (cublasXt.h) over gpucloud's cuBLAS: the host-interface GEMM that takes matrices in
 * host or device memory and tiles the work over the selected GPUs. Here it runs on the first
 * selected GPU, tile by tile (blockDim x blockDim of C): each tile's panels of A and B and the tile
 * of C go to device memory (cublasSetMatrix, a copy through the guest library), one remoted GEMM
 * computes it, and the tile comes back. Operands already in device memory are used in place; when
 * all three are, it is one GEMM. NVIDIA's cublasXt splits tiles over several GPUs and may give some
 * to a CPU routine; here several selected GPUs work as the first one, and a CPU share is refused.
 * The S and D forms are remoted; the others answer CUBLAS_STATUS_NOT_SUPPORTED (rest.c). */
#include <cublasXt.h>
#include <cuda.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

struct cublasXtContext {
    int device;             /* the GPU the tiles run on (the first selected); -1 before DeviceSelect */
    int block;              /* tile edge */
    int pinning;            /* cublasXtPinnedMemMode_t, kept for Get */
    cublasHandle_t blas;    /* made at the first GEMM, in the device's primary context */
};

enum { DEFAULT_BLOCK = 1024 };

EXPORT cublasStatus_t cublasXtCreate(cublasXtHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasXtContext *x = calloc(1, sizeof *x);
    if (!x) return CUBLAS_STATUS_ALLOC_FAILED;
    x->device = -1;
    x->block = DEFAULT_BLOCK;
    *handle = x;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtDestroy(cublasXtHandle_t x) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = x->blas ? cublasDestroy(x->blas) : CUBLAS_STATUS_SUCCESS;
    free(x);
    return s;
}

static int device_count(void) {
    int n = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return n;
}

EXPORT cublasStatus_t cublasXtMaxBoards(int *nbGpuBoards) {
    if (!nbGpuBoards) return CUBLAS_STATUS_INVALID_VALUE;
    *nbGpuBoards = device_count();
    return CUBLAS_STATUS_SUCCESS;
}

/* One board per GPU: a session's GPUs are whole devices. */
EXPORT cublasStatus_t cublasXtGetNumBoards(int nbDevices, int deviceId[], int *nbBoards) {
    if (!nbBoards || nbDevices <= 0 || !deviceId) return CUBLAS_STATUS_INVALID_VALUE;
    *nbBoards = nbDevices;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtDeviceSelect(cublasXtHandle_t x, int nbDevices, int deviceId[]) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    int n = device_count();
    if (nbDevices <= 0 || !deviceId) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < nbDevices; i++)
        if (deviceId[i] < 0 || deviceId[i] >= n) return CUBLAS_STATUS_INVALID_VALUE;
    if (x->blas && deviceId[0] != x->device) return CUBLAS_STATUS_NOT_SUPPORTED; /* after a GEMM, as NVIDIA's */
    x->device = deviceId[0];
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtSetBlockDim(cublasXtHandle_t x, int blockDim) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (blockDim <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    x->block = blockDim;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtGetBlockDim(cublasXtHandle_t x, int *blockDim) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!blockDim) return CUBLAS_STATUS_INVALID_VALUE;
    *blockDim = x->block;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtSetPinningMemMode(cublasXtHandle_t x, cublasXtPinnedMemMode_t mode) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLASXT_PINNING_DISABLED && mode != CUBLASXT_PINNING_ENABLED) return CUBLAS_STATUS_INVALID_VALUE;
    x->pinning = mode; /* copies go through the guest library's staging either way */
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasXtGetPinningMemMode(cublasXtHandle_t x, cublasXtPinnedMemMode_t *mode) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = (cublasXtPinnedMemMode_t)x->pinning;
    return CUBLAS_STATUS_SUCCESS;
}

/* The CPU share: none (the default) is accepted; a CPU routine would run in the guest while the
 * tiles run remotely, which this library does not split. */
EXPORT cublasStatus_t cublasXtSetCpuRatio(cublasXtHandle_t x, cublasXtBlasOp_t op, cublasXtOpType_t type, float ratio) {
    (void)op, (void)type;
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ratio < 0 || ratio > 1) return CUBLAS_STATUS_INVALID_VALUE;
    return ratio == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

EXPORT cublasStatus_t cublasXtSetCpuRoutine(cublasXtHandle_t x, cublasXtBlasOp_t op, cublasXtOpType_t type, void *fn) {
    (void)op, (void)type;
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    return fn ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}

/* on_device: whether p is device memory of this process. */
static int on_device(const void *p) {
    unsigned type = 0;
    return cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_DEVICE;
}

/* ready makes the handle's device current (its primary context) and its cuBLAS handle. */
static cublasStatus_t ready(cublasXtHandle_t x) {
    if (x->device < 0) return CUBLAS_STATUS_NOT_INITIALIZED; /* no cublasXtDeviceSelect yet */
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, x->device) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!x->blas) return cublasCreate(&x->blas);
    return CUBLAS_STATUS_SUCCESS;
}

typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                  const void *, int, const void *, int, const void *, void *, int);

/* A sub-matrix of a column-major operand: rows x cols from p with leading dimension ld, on the
 * device already (dev) or staged into buf. */
struct panel {
    const char *p;
    size_t ld;
    int dev;
};

/* stage gives the device address of rows x cols of panel q starting at (r0, c0): in place when it
 * is device memory (*ld its own), else copied into buf (*ld = rows). */
static cublasStatus_t stage(const struct panel *q, size_t r0, size_t c0, int rows, int cols, size_t elem,
                            CUdeviceptr buf, const char **at, int *ld) {
    const char *src = q->p + (c0 * q->ld + r0) * elem;
    if (q->dev) {
        *at = src;
        *ld = (int)q->ld;
        return CUBLAS_STATUS_SUCCESS;
    }
    *at = (const char *)(uintptr_t)buf;
    *ld = rows;
    return cublasSetMatrix(rows, cols, (int)elem, src, (int)q->ld, (void *)(uintptr_t)buf, rows);
}

static int fits(size_t v) { return v <= 0x7fffffff; }

static cublasStatus_t xt_gemm(cublasXtHandle_t x, gemm_fn gemm, size_t elem, cublasOperation_t ta,
                              cublasOperation_t tb, size_t m, size_t n, size_t k, const void *alpha, const void *A,
                              size_t lda, const void *B, size_t ldb, const void *beta, void *C, size_t ldc) {
    if (!x) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || !alpha || !beta ||
        lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda == 0 || ldb == 0 ||
        ldc == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!fits(m) || !fits(n) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc))
        return CUBLAS_STATUS_NOT_SUPPORTED; /* a tile's GEMM takes 32-bit sizes */
    CUcontext caller = NULL; /* the caller's context stays current after the call */
    (void)cuCtxGetCurrent(&caller);
    cublasStatus_t s = ready(x);
    if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) goto restore;
    struct panel a = {A, lda, on_device(A)}, b = {B, ldb, on_device(B)}, c = {C, ldc, on_device(C)};
    if (a.dev && b.dev && c.dev) {
        s = gemm(x->blas, ta, tb, (int)m, (int)n, (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
        goto restore;
    }
    size_t bd = (size_t)x->block, kk = k ? k : 1;
    CUdeviceptr da = 0, db = 0, dc = 0;
    if ((!a.dev && cuMemAlloc(&da, bd * kk * elem) != CUDA_SUCCESS) ||
        (!b.dev && cuMemAlloc(&db, kk * bd * elem) != CUDA_SUCCESS) ||
        (!c.dev && cuMemAlloc(&dc, bd * bd * elem) != CUDA_SUCCESS)) {
        s = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
    for (size_t j = 0; j < n && s == CUBLAS_STATUS_SUCCESS; j += bd) {
        int nb = (int)(n - j < bd ? n - j : bd);
        const char *pb;
        int ldbb;
        /* op(B)'s columns j..j+nb: B's columns when not transposed, else its rows. */
        s = tb == CUBLAS_OP_N ? stage(&b, 0, j, (int)k, nb, elem, db, &pb, &ldbb)
                              : stage(&b, j, 0, nb, (int)k, elem, db, &pb, &ldbb);
        for (size_t i = 0; i < m && s == CUBLAS_STATUS_SUCCESS; i += bd) {
            int mb = (int)(m - i < bd ? m - i : bd);
            const char *pa, *pc;
            int ldaa, ldcc;
            s = ta == CUBLAS_OP_N ? stage(&a, i, 0, mb, (int)k, elem, da, &pa, &ldaa)
                                  : stage(&a, 0, i, (int)k, mb, elem, da, &pa, &ldaa);
            if (s == CUBLAS_STATUS_SUCCESS) s = stage(&c, i, j, mb, nb, elem, dc, &pc, &ldcc);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = gemm(x->blas, ta, tb, mb, nb, (int)k, alpha, pa, ldaa, pb, ldbb, beta, (void *)pc, ldcc);
            if (s == CUBLAS_STATUS_SUCCESS && !c.dev)
                s = cublasGetMatrix(mb, nb, (int)elem, pc, ldcc, (char *)C + (j * ldc + i) * elem, (int)ldc);
        }
    }
out:
    if (da) cuMemFree(da);
    if (db) cuMemFree(db);
    if (dc) cuMemFree(dc);
restore:
    if (caller) (void)cuCtxSetCurrent(caller);
    return s;
}

EXPORT cublasStatus_t cublasXtSgemm(cublasXtHandle_t x, cublasOperation_t ta, cublasOperation_t tb, size_t m,
                                    size_t n, size_t k, const float *alpha, const float *A, size_t lda, const float *B,
                                    size_t ldb, const float *beta, float *C, size_t ldc) {
    return xt_gemm(x, (gemm_fn)cublasSgemm, sizeof(float), ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

EXPORT cublasStatus_t cublasXtDgemm(cublasXtHandle_t x, cublasOperation_t ta, cublasOperation_t tb, size_t m,
                                    size_t n, size_t k, const double *alpha, const double *A, size_t lda,
                                    const double *B, size_t ldb, const double *beta, double *C, size_t ldc) {
    return xt_gemm(x, (gemm_fn)cublasDgemm, sizeof(double), ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

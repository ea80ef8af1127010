/* gpucloud's libcublas.so.13: cuBLAS remoted at the library API, as rCUDA does. NVIDIA's
 * libcublas carries NVIDIA's runtime inside, which will not start on a driver other than NVIDIA's
 * (docs/benchmarks/gpu-runtime-compat.md); so a guest image installs this library in its place,
 * and each call goes to gpuserverd, whose worker runs NVIDIA's real cuBLAS on the real GPU.
 *
 * Handles, streams, pointer and math modes, GEMM, trsm and batched LU go over the guest libcuda's session, reached
 * through gpucloud's private export table (include/gpucloud_private.h): over any other libcuda
 * this library refuses to start, saying why. Matrix and vector copies are driver-API copies.
 * GEMM is sent like a kernel launch, without waiting for a reply: its arguments are checked here
 * first (as cuBLAS checks them before launching), and errors of its execution surface at the next
 * synchronising call. Functions not implemented here are not exported: a program that needs one
 * fails to load, naming it, rather than running wrongly.
 *
 * Built against NVIDIA's cublas_v2.h where the toolkit is (every signature checked against
 * NVIDIA's declarations), and against testshim/cublas_v2.h in CI. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_LIB_NAME "libcublas"
#include "session.h"

#define EXPORT __attribute__((visibility("default")))
/* Exports the plain name NVIDIA's header maps to target (cublas_v2.h's macros would rewrite a
 * declaration that spells it, hence the assembler name). */
#define PLAIN(id, name, target) \
    EXPORT __typeof__(target) id __asm__(name) __attribute__((alias(#target)))

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cublas_guest = 1;

/* ---- the guest libcuda's session ---- */

static cublasStatus_t ready(void) { return session_ready() ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED; }

#define ENCODE_CALL(lower, TYPE, msg, no_reply, out)                                    \
    do {                                                                                \
        uint8_t buf_[256];                                                              \
        size_t n_ = gw_##lower##_size(&(msg));                                          \
        if (n_ > sizeof buf_) return CUBLAS_STATUS_INTERNAL_ERROR;                      \
        gw_##lower##_encode(&(msg), buf_);                                              \
        return session_call(GW_TYPE_##TYPE, buf_, n_, (no_reply), (out));                       \
    } while (0)

/* ---- handles ---- */

#define HANDLE_MAGIC 0x67636273u

struct cublasContext {
    struct session_handle base; /* magic, device, the worker's id; the live list */
    cudaStream_t stream;
    cublasPointerMode_t pmode;
    cublasMath_t math;
    /* The stream, workspace and math mode the caller set (above, and ws_user/ws/ws_bytes: a
     * workspace of the caller's, which cuBLAS's cublasSetStream resets to its own), and what the
     * worker's handle has (sent_*). PyTorch sets all three before every matmul
     * (getCurrentCUDABlasHandle): they are sent only when the next computing call finds them
     * changed, without waiting, so that costs nothing (see flush_state). */
    int ws_user;
    void *ws;
    size_t ws_bytes;
    int sent_valid, sent_ws_user; /* sent_valid: stream and math mode were sent */
    cudaStream_t sent_stream;
    cublasMath_t sent_math;
    void *sent_ws;
    size_t sent_ws_bytes;
    CUdeviceptr ones; /* a float 1 at +0 and a double 1 at +8 (axpy's and copy's unit matrix); a
                       * host-mode dot's result at +16 (ONES_SCRATCH) */
};

enum { ONES_SCRATCH = 16 };

static int is_live(cublasHandle_t h) { return session_live(h, HANDLE_MAGIC, NULL, NULL); }

/* gpucloud_cublas_handle gives gpucloud's libcublasLt a live handle's server id and device:
 * NVIDIA's cublasHandle_t serves as a cublasLtHandle_t, and PyTorch passes its cuBLAS handle to
 * cuBLASLt. 0 when h is not a live handle of this library. */
EXPORT int gpucloud_cublas_handle(const void *h, uint64_t *server, int *device) {
    return h && session_live(h, HANDLE_MAGIC, server, device);
}

/* on_device makes sure the calling thread works on the handle's device: with no current context
 * it makes that device's primary context current (as the runtime does lazily); a thread current
 * on another device is refused (the handle belongs to its device). */
static cublasStatus_t on_device(cublasHandle_t h) {
    int r = session_on_device(h->base.device);
    return r == 0 ? CUBLAS_STATUS_SUCCESS : r > 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
}

/* check admits a call on h: the library ready, h live, the thread on its device. */
static cublasStatus_t check(cublasHandle_t h) {
    cublasStatus_t s = ready();
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!h || !is_live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    return on_device(h);
}

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    return session_new_handle(sizeof(struct cublasContext), HANDLE_MAGIC, GW_TYPE_BLAS_CREATE, (void **)handle);
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (h->ones) (void)cuMemFree(h->ones);
    return session_drop_handle(h, HANDLE_MAGIC);
}

EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *version) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION; /* the cuBLAS API this library was built against */
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    h->stream = stream, h->ws_user = 0; /* as cuBLAS: back to its own workspace */
    return CUBLAS_STATUS_SUCCESS;
}

/* flush_state sends the worker what of the handle's stream, workspace and math mode changed
 * since it last did, without waiting (like a launch: a refusal surfaces at the next synchronising
 * call; the workspace was checked here when set). */
static cublasStatus_t flush_state(cublasHandle_t h) {
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    uint8_t b[64];
    if (!h->sent_valid || h->sent_stream != h->stream) {
        struct gw_blas_set_stream m = {.handle = h->base.server, .stream = T->stream_handle((CUstream)h->stream)};
        gw_blas_set_stream_encode(&m, b);
        s = session_call(GW_TYPE_BLAS_SET_STREAM, b, gw_blas_set_stream_size(&m), 1, NULL);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
        h->sent_stream = h->stream;
    }
    if (h->sent_ws_user != h->ws_user || (h->ws_user && (h->sent_ws != h->ws || h->sent_ws_bytes != h->ws_bytes))) {
        /* 0 bytes: the worker's own workspace again */
        struct gw_blas_set_workspace m = {.handle = h->base.server, .ptr = h->ws_user ? (uint64_t)(uintptr_t)h->ws : 0,
                                          .bytes = h->ws_user ? h->ws_bytes : 0};
        gw_blas_set_workspace_encode(&m, b);
        s = session_call(GW_TYPE_BLAS_SET_WORKSPACE, b, gw_blas_set_workspace_size(&m), 1, NULL);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
        h->sent_ws_user = h->ws_user, h->sent_ws = h->ws, h->sent_ws_bytes = h->ws_bytes;
    }
    if (!h->sent_valid || h->sent_math != h->math) {
        struct gw_blas_set_math_mode m = {.handle = h->base.server, .mode = (uint32_t)h->math};
        gw_blas_set_math_mode_encode(&m, b);
        s = session_call(GW_TYPE_BLAS_SET_MATH_MODE, b, gw_blas_set_math_mode_size(&m), 1, NULL);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
        h->sent_math = h->math;
    }
    h->sent_valid = 1;
    return s;
}

EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *stream) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    h->pmode = mode; /* travels with each call */
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t *mode) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->pmode;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    /* 0-4 (4: CUDA 13's FP32 emulated by BF16x9), optionally with the reduction flag (16); the
     * worker's cuBLAS judges whether it has the mode. */
    unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base > 4) return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode; /* sent with the next computing call (flush_state) */
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

/* in_device_memory: [p, p+n) is device memory of this process: one allocation, or virtual-memory
 * mappings that follow one another (PyTorch's expandable segments map a segment page by page, and
 * a workspace may span several), as the guest libcuda's pointer attributes report them. */
static int in_device_memory(const void *p, size_t n) {
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)p;
    if (n > UINT64_MAX - a) return 0;
    CUdeviceptr end = a + n;
    do {
        CUdeviceptr base = 0;
        size_t size = 0;
        if (cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a) != CUDA_SUCCESS ||
            cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a) != CUDA_SUCCESS ||
            a < base || size == 0 || a - base >= size)
            return 0;
        a = base + size;
    } while (a < end);
    return 1;
}

/* The workspace must be the program's device memory (gpuserverd checks it again: inside one of
 * the session's allocations). NULL or 0 bytes: back to the worker's own workspace. */
EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t bytes) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!workspace) bytes = 0;
    if (workspace && !in_device_memory(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    h->ws_user = bytes > 0, h->ws = workspace, h->ws_bytes = bytes; /* sent with the next computing call */
    return CUBLAS_STATUS_SUCCESS;
}

PLAIN(gc_plain_create, "cublasCreate", cublasCreate_v2);
PLAIN(gc_plain_destroy, "cublasDestroy", cublasDestroy_v2);
PLAIN(gc_plain_set_stream, "cublasSetStream", cublasSetStream_v2);
PLAIN(gc_plain_get_stream, "cublasGetStream", cublasGetStream_v2);
PLAIN(gc_plain_set_pointer_mode, "cublasSetPointerMode", cublasSetPointerMode_v2);
PLAIN(gc_plain_get_pointer_mode, "cublasGetPointerMode", cublasGetPointerMode_v2);
PLAIN(gc_plain_set_workspace, "cublasSetWorkspace", cublasSetWorkspace_v2);
/* Not cublasGetVersion, cublasSgemm or cublasDgemm: those plain names are the legacy API's
 * (cublas.h), with other signatures, which this library does not implement. */

/* ---- statuses ---- */

EXPORT const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

EXPORT const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
    default: return "unknown error";
    }
}

/* ---- matrix and vector copies: driver-API 2-D copies (a vector is a column of rows) ---- */

/* copy2d moves rows x cols elements between host and device, columns pitch_src and pitch_dst
 * elements apart; a failed copy is CUBLAS_STATUS_MAPPING_ERROR, as in cuBLAS. */
static cublasStatus_t copy2d(int to_device, size_t width, size_t height, const void *src, size_t spitch, void *dst,
                             size_t dpitch, CUstream stream, int async) {
    cublasStatus_t s = ready();
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (width == 0 || height == 0) return CUBLAS_STATUS_SUCCESS;
    CUresult rc;
    if (spitch == width && dpitch == width) { /* contiguous: one copy */
        size_t n = width * height;
        if (to_device)
            rc = async ? cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, n, stream)
                       : cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n);
        else
            rc = async ? cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, n, stream)
                       : cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n);
    } else {
        CUDA_MEMCPY2D c;
        memset(&c, 0, sizeof c);
        c.WidthInBytes = width;
        c.Height = height;
        c.srcPitch = spitch;
        c.dstPitch = dpitch;
        if (to_device) {
            c.srcMemoryType = CU_MEMORYTYPE_HOST;
            c.srcHost = src;
            c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = (CUdeviceptr)(uintptr_t)src;
            c.dstMemoryType = CU_MEMORYTYPE_HOST;
            c.dstHost = dst;
        }
        rc = async ? cuMemcpy2DAsync(&c, stream) : cuMemcpy2D(&c);
    }
    return rc == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

static cublasStatus_t matrix(int to_device, int rows, int cols, int elem, const void *a, int lda, void *b, int ldb,
                             cudaStream_t stream, int async) {
    if (rows < 0 || cols < 0 || elem <= 0 || lda <= 0 || ldb <= 0 || lda < rows || ldb < rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
    if (!a || !b) return CUBLAS_STATUS_INVALID_VALUE;
    size_t e = (size_t)elem;
    return copy2d(to_device, (size_t)rows * e, (size_t)cols, a, (size_t)lda * e, b, (size_t)ldb * e,
                  (CUstream)stream, async);
}

static cublasStatus_t vector(int to_device, int n, int elem, const void *x, int incx, void *y, int incy,
                             cudaStream_t stream, int async) {
    if (n < 0 || elem <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!x || !y) return CUBLAS_STATUS_INVALID_VALUE;
    size_t e = (size_t)elem;
    if (incx == 1 && incy == 1) return copy2d(to_device, (size_t)n * e, 1, x, (size_t)n * e, y, (size_t)n * e, (CUstream)stream, async);
    return copy2d(to_device, e, (size_t)n, x, (size_t)incx * e, y, (size_t)incy * e, (CUstream)stream, async);
}

EXPORT cublasStatus_t cublasSetMatrix(int rows, int cols, int elem, const void *A, int lda, void *B, int ldb) {
    return matrix(1, rows, cols, elem, A, lda, B, ldb, NULL, 0);
}
EXPORT cublasStatus_t cublasGetMatrix(int rows, int cols, int elem, const void *A, int lda, void *B, int ldb) {
    return matrix(0, rows, cols, elem, A, lda, B, ldb, NULL, 0);
}
EXPORT cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elem, const void *A, int lda, void *B, int ldb,
                                           cudaStream_t stream) {
    return matrix(1, rows, cols, elem, A, lda, B, ldb, stream, 1);
}
EXPORT cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elem, const void *A, int lda, void *B, int ldb,
                                           cudaStream_t stream) {
    return matrix(0, rows, cols, elem, A, lda, B, ldb, stream, 1);
}
EXPORT cublasStatus_t cublasSetVector(int n, int elem, const void *x, int incx, void *y, int incy) {
    return vector(1, n, elem, x, incx, y, incy, NULL, 0);
}
EXPORT cublasStatus_t cublasGetVector(int n, int elem, const void *x, int incx, void *y, int incy) {
    return vector(0, n, elem, x, incx, y, incy, NULL, 0);
}
EXPORT cublasStatus_t cublasSetVectorAsync(int n, int elem, const void *x, int incx, void *y, int incy,
                                           cudaStream_t stream) {
    return vector(1, n, elem, x, incx, y, incy, stream, 1);
}
EXPORT cublasStatus_t cublasGetVectorAsync(int n, int elem, const void *x, int incx, void *y, int incy,
                                           cudaStream_t stream) {
    return vector(0, n, elem, x, incx, y, incy, stream, 1);
}

/* ---- GEMM ---- */

/* scalar_size is the size of alpha and beta under a compute type (cuBLAS's rule: half for 16F,
 * float for the 32F family, double for 64F, int for 32I); 0 for one cuBLAS does not have. */
static size_t scalar_size(int compute) {
    switch (compute) {
    case 64: case 65: return 2;                                 /* CUBLAS_COMPUTE_16F[_PEDANTIC] */
    case 68: case 69: case 74: case 75: case 77: case 78: return 4; /* 32F, its fast and emulated forms */
    case 70: case 71: return 8;                                 /* 64F */
    case 72: case 73: return 4;                                 /* 32I */
    }
    return 0;
}

static int known_type(int t) { /* cudaDataType_t: 16F, 32F, 64F, 8I, 32I, 16BF */
    return t == 2 || t == 0 || t == 1 || t == 3 || t == 10 || t == 14;
}

/* gemm checks the arguments as cuBLAS does before launching (the same checks gpuserverd makes,
 * backend.Gemm.Validate) and sends the call without waiting. ex 0: <t>gemm with all types at
 * type and its compute type; 1: GemmEx. */
static cublasStatus_t gemm_scalars(cublasHandle_t h, int host_scalars, int ex, int at, int bt, int ct, int compute,
                                   int algo, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, int lda, long long sa, const void *B, int ldb,
                                   long long sb, const void *beta, void *C, int ldc, long long sc, int batch) {
    cublasStatus_t s = check(h);
    if (s == CUBLAS_STATUS_SUCCESS) s = flush_state(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    size_t ss = scalar_size(compute);
    if (!ss || !known_type(at) || !known_type(bt) || !known_type(ct)) return CUBLAS_STATUS_INVALID_VALUE;
    if ((unsigned)ta > CUBLAS_OP_C || (unsigned)tb > CUBLAS_OP_C || m < 0 || n < 0 || k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
    if (lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (batch > 1 && (sa < 0 || sb < 0 || sc < 0)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS; /* nothing to compute */
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    struct gw_blas_gemm g = {
        .handle = h->base.server, .ex = (uint32_t)ex, .atype = (uint32_t)at, .btype = (uint32_t)bt, .ctype = (uint32_t)ct,
        .compute = (uint32_t)compute, .algo = algo, .transa = (uint32_t)ta, .transb = (uint32_t)tb, .m = m, .n = n,
        .k = k, .pointer_mode = !host_scalars && h->pmode == CUBLAS_POINTER_MODE_DEVICE, .a = (uint64_t)(uintptr_t)A, .lda = lda,
        .stride_a = (uint64_t)sa, .b = (uint64_t)(uintptr_t)B, .ldb = ldb, .stride_b = (uint64_t)sb,
        .c = (uint64_t)(uintptr_t)C, .ldc = ldc, .stride_c = (uint64_t)sc, .batch = batch,
    };
    if (g.pointer_mode) {
        g.alpha = (uint64_t)(uintptr_t)alpha;
        g.beta = (uint64_t)(uintptr_t)beta;
    } else { /* the scalars' bytes travel little-endian in the low bytes, as they lie in memory here */
        memcpy(&g.alpha, alpha, ss);
        memcpy(&g.beta, beta, ss);
    }
    ENCODE_CALL(blas_gemm, BLAS_GEMM, g, 1, NULL);
}

/* gemm: alpha and beta where the handle's pointer mode says. */
static cublasStatus_t gemm(cublasHandle_t h, int ex, int at, int bt, int ct, int compute, int algo,
                           cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                           const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                           const void *beta, void *C, int ldc, long long sc, int batch) {
    return gemm_scalars(h, 0, ex, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C,
                        ldc, sc, batch);
}

/* gemm's ex, types, compute type and algorithm for <t>gemm: CUDA_R_32F with CUBLAS_COMPUTE_32F,
 * CUDA_R_64F with CUBLAS_COMPUTE_64F. */
#define S_TYPES 0, 0, 0, 0, 68, -1
#define D_TYPES 0, 1, 1, 1, 70, -1

EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                     const float *alpha, const float *A, int lda, const float *B, int ldb,
                                     const float *beta, float *C, int ldc) {
    return gemm(h, S_TYPES, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                     const double *alpha, const double *A, int lda, const double *B, int ldb,
                                     const double *beta, double *C, int ldc) {
    return gemm(h, D_TYPES, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float *alpha, const float *A, int lda,
                                                long long int sa, const float *B, int ldb, long long int sb,
                                                const float *beta, float *C, int ldc, long long int sc, int batch) {
    return gemm(h, S_TYPES, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

EXPORT cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const double *alpha, const double *A, int lda,
                                                long long int sa, const double *B, int ldb, long long int sb,
                                                const double *beta, double *C, int ldc, long long int sc, int batch) {
    return gemm(h, D_TYPES, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

/* cublas<t>gemmBatched: the arrays of matrix addresses live in device memory, where the caller's
 * earlier work on the handle's stream may still be writing them, so they are read back in that
 * stream's order. Evenly spaced matrices (as batchCUBLAS and most callers allocate them) go as one
 * strided batch; others as one GEMM each, in order on the same stream, which computes the same. */
static cublasStatus_t gemm_batched(cublasHandle_t h, int ex, int at, int bt, int ct, int compute, int algo, size_t esize,
                                   cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                                   const void *const *A, int lda, const void *const *B, int ldb, const void *beta,
                                   void *const *C, int ldc, int batch) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (batch == 0 || m == 0 || n == 0) /* arguments still checked, nothing read */
        return gemm(h, ex, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, NULL, lda, 0, NULL, ldb, 0, beta, NULL,
                    ldc, 0, 0);
    if (!A || !B || !C || batch > (1 << 24)) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t *p = malloc(3 * (size_t)batch * sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    size_t n8 = (size_t)batch * sizeof *p;
    CUstream st = (CUstream)h->stream;
    CUresult rc = cuMemcpyDtoHAsync(p, (CUdeviceptr)(uintptr_t)A, n8, st);
    if (rc == CUDA_SUCCESS) rc = cuMemcpyDtoHAsync(p + batch, (CUdeviceptr)(uintptr_t)B, n8, st);
    if (rc == CUDA_SUCCESS) rc = cuMemcpyDtoHAsync(p + 2 * batch, (CUdeviceptr)(uintptr_t)C, n8, st);
    if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(st);
    if (rc != CUDA_SUCCESS) {
        free(p);
        return rc == CUDA_ERROR_INVALID_VALUE ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_EXECUTION_FAILED;
    }
    long long stride[3] = {0, 0, 0};
    int even = 1;
    for (int a = 0; a < 3 && even; a++) {
        const uint64_t *q = p + (size_t)a * batch;
        long long d = batch > 1 ? (long long)(q[1] - q[0]) : 0;
        even = d >= 0 && d % (long long)esize == 0 && (a != 2 || d > 0 || batch == 1);
        for (int i = 1; i < batch && even; i++) even = q[i] - q[i - 1] == (uint64_t)d;
        stride[a] = d / (long long)esize;
    }
    if (even)
        s = gemm(h, ex, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, (const void *)(uintptr_t)p[0], lda, stride[0],
                 (const void *)(uintptr_t)p[batch], ldb, stride[1], beta, (void *)(uintptr_t)p[2 * batch], ldc, stride[2],
                 batch);
    for (int i = 0; !even && i < batch && s == CUBLAS_STATUS_SUCCESS; i++)
        s = gemm(h, ex, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, (const void *)(uintptr_t)p[i], lda, 0,
                 (const void *)(uintptr_t)p[batch + i], ldb, 0, beta, (void *)(uintptr_t)p[2 * batch + i], ldc, 0, 1);
    free(p);
    return s;
}

EXPORT cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *const A[], int lda,
                                         const float *const B[], int ldb, const float *beta, float *const C[], int ldc,
                                         int batch) {
    return gemm_batched(h, S_TYPES, 4, ta, tb, m, n, k, alpha, (const void *const *)A, lda, (const void *const *)B, ldb,
                        beta, (void *const *)C, ldc, batch);
}

EXPORT cublasStatus_t cublasDgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double *alpha, const double *const A[], int lda,
                                         const double *const B[], int ldb, const double *beta, double *const C[],
                                         int ldc, int batch) {
    return gemm_batched(h, D_TYPES, 8, ta, tb, m, n, k, alpha, (const void *const *)A, lda, (const void *const *)B, ldb,
                        beta, (void *const *)C, ldc, batch);
}

/* GemmEx: the types travel as they are; which combinations exist is the worker's cuBLAS's to say
 * (CUBLAS_STATUS_NOT_SUPPORTED, at the next synchronisation). */
EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                                   cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return gemm(h, 1, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void *alpha, const void *A, cudaDataType at,
                                                 int lda, long long int sa, const void *B, cudaDataType bt, int ldb,
                                                 long long int sb, const void *beta, void *C, cudaDataType ct, int ldc,
                                                 long long int sc, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t algo) {
    return gemm(h, 1, at, bt, ct, compute, algo, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                batch);
}

/* SgemmEx: float scalars and compute, A, B and C of the types given (what the worker's cuBLAS
 * runs as GemmEx under CUBLAS_COMPUTE_32F). */
EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const float *alpha, const void *A, cudaDataType at, int lda, const void *B,
                                    cudaDataType bt, int ldb, const float *beta, void *C, cudaDataType ct, int ldc) {
    return gemm(h, 1, at, bt, ct, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0,
                beta, C, ldc, 0, 1);
}

/* ---- level 1 and 2 as GEMMs on the worker's cuBLAS ----
 * A vector x of n elements incx apart is a 1 x n matrix with leading dimension incx, so gemv,
 * dot and scal are GEMMs over row vectors: the same remoted call, checked the same way. Results
 * agree with NVIDIA's gemv/dot/scal to rounding (another kernel, another summation order).
 * Negative increments (cuBLAS's reversed order) are not taken. */

/* gemv: y^T = alpha x^T op(A)^T + beta y^T, a 1 x len(y) GEMM with K = len(x). */
static cublasStatus_t gemv(cublasHandle_t h, int dbl, cublasOperation_t t, int m, int n, const void *alpha,
                           const void *A, int lda, const void *x, int incx, const void *beta, void *y, int incy) {
    if ((unsigned)t > CUBLAS_OP_C || m < 0 || n < 0 || lda < (m > 1 ? m : 1) || incx == 0 || incy == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (incx < 0 || incy < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return check(h); /* quick return, as cuBLAS */
    int out = t == CUBLAS_OP_N ? m : n, k = t == CUBLAS_OP_N ? n : m;
    cublasOperation_t tb = t == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (dbl) return gemm(h, D_TYPES, CUBLAS_OP_N, tb, 1, out, k, alpha, x, incx, 0, A, lda, 0, beta, y, incy, 0, 1);
    return gemm(h, S_TYPES, CUBLAS_OP_N, tb, 1, out, k, alpha, x, incx, 0, A, lda, 0, beta, y, incy, 0, 1);
}

EXPORT cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t t, int m, int n, const float *alpha,
                                     const float *A, int lda, const float *x, int incx, const float *beta, float *y,
                                     int incy) {
    return gemv(h, 0, t, m, n, alpha, A, lda, x, incx, beta, y, incy);
}

EXPORT cublasStatus_t cublasDgemv_v2(cublasHandle_t h, cublasOperation_t t, int m, int n, const double *alpha,
                                     const double *A, int lda, const double *x, int incx, const double *beta,
                                     double *y, int incy) {
    return gemv(h, 1, t, m, n, alpha, A, lda, x, incx, beta, y, incy);
}

/* ones gives the handle's device unit scalars (and at ONES_SCRATCH a result's room), made at
 * first use. Not while its stream is being captured: the copy that fills them would become part
 * of the graph. */
static cublasStatus_t ones(cublasHandle_t h, CUdeviceptr *p) {
    if (!h->ones) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
        if (cuStreamIsCapturing((CUstream)h->stream, &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE) {
            static atomic_int told;
            if (!atomic_exchange(&told, 1))
                fprintf(stderr, "gpucloud libcublas: the first axpy or copy of a handle during stream capture is not "
                                "remoted (CUBLAS_STATUS_NOT_SUPPORTED); call one before capturing\n");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        const struct { float f; float pad; double d, scratch; } one = {1, 0, 1, 0};
        CUdeviceptr d;
        if (cuMemAlloc(&d, sizeof one) != CUDA_SUCCESS) return CUBLAS_STATUS_ALLOC_FAILED;
        if (cuMemcpyHtoD(d, &one, sizeof one) != CUDA_SUCCESS) {
            cuMemFree(d);
            return CUBLAS_STATUS_INTERNAL_ERROR;
        }
        h->ones = d;
    }
    *p = h->ones;
    return CUBLAS_STATUS_SUCCESS;
}

/* dot: result = x^T y, a 1 x 1 GEMM into the result: device memory in device pointer mode (as
 * PyTorch sets it); in host mode a GEMM into the handle's scratch and a copy back, which waits for
 * the handle's stream, as NVIDIA's host-mode dot does. */
static cublasStatus_t dot(cublasHandle_t h, int dbl, int n, const void *x, int incx, const void *y, int incy,
                          void *result) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!result) return CUBLAS_STATUS_INVALID_VALUE;
    if (incx < 0 || incy < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (n < 0 || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (h->pmode != CUBLAS_POINTER_MODE_DEVICE) { /* into the handle's scratch, then here: waits, as NVIDIA's */
        CUdeviceptr u;
        if ((s = ones(h, &u)) != CUBLAS_STATUS_SUCCESS) return s;
        CUdeviceptr scratch = u + ONES_SCRATCH;
        h->pmode = CUBLAS_POINTER_MODE_DEVICE;
        s = dot(h, dbl, n, x, incx, y, incy, (void *)(uintptr_t)scratch);
        h->pmode = CUBLAS_POINTER_MODE_HOST;
        if (s == CUBLAS_STATUS_SUCCESS && (cuMemcpyDtoHAsync(result, scratch, dbl ? 8 : 4, (CUstream)h->stream) != CUDA_SUCCESS ||
                                           cuStreamSynchronize((CUstream)h->stream) != CUDA_SUCCESS))
            s = CUBLAS_STATUS_EXECUTION_FAILED;
        return s;
    }
    static const float f1 = 1, f0 = 0;
    static const double d1 = 1, d0 = 0;
    /* n 0: K 0, so the result is beta * result = 0, as cuBLAS's */
    if (dbl)
        return gemm_scalars(h, 1, D_TYPES, CUBLAS_OP_N, CUBLAS_OP_T, 1, 1, n, &d1, x, incx, 0, y, incy, 0, &d0, result, 1,
                            0, 1);
    return gemm_scalars(h, 1, S_TYPES, CUBLAS_OP_N, CUBLAS_OP_T, 1, 1, n, &f1, x, incx, 0, y, incy, 0, &f0, result, 1, 0,
                        1);
}

EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float *x, int incx, const float *y, int incy,
                                    float *result) {
    return dot(h, 0, n, x, incx, y, incy, result);
}

EXPORT cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double *x, int incx, const double *y, int incy,
                                    double *result) {
    return dot(h, 1, n, x, incx, y, incy, result);
}

/* scal: x = alpha x, a GEMM with K 0 (C = beta C) and alpha as beta. One difference: alpha 0
 * writes zeros over NaNs (GEMM's beta 0), where NVIDIA's scal keeps them. */
EXPORT cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x, int incx) {
    if (n <= 0 || incx <= 0) return check(h); /* nothing to do, as cuBLAS */
    return gemm(h, S_TYPES, CUBLAS_OP_N, CUBLAS_OP_N, 1, n, 0, alpha, x, 1, 0, x, 1, 0, alpha, x, incx, 0, 1);
}

EXPORT cublasStatus_t cublasDscal_v2(cublasHandle_t h, int n, const double *alpha, double *x, int incx) {
    if (n <= 0 || incx <= 0) return check(h);
    return gemm(h, D_TYPES, CUBLAS_OP_N, CUBLAS_OP_N, 1, n, 0, alpha, x, 1, 0, x, 1, 0, alpha, x, incx, 0, 1);
}

/* axpy (y = alpha x + y) and copy (y = x): a GEMM of the row vectors, 1 x 1 times 1 x n, with the
 * increments as leading dimensions. The 1 x 1 factor is alpha itself where it is device memory
 * (device pointer mode), else the handle's unit. */
static cublasStatus_t axpy(cublasHandle_t h, int dbl, int n, const void *alpha, const void *x, int incx, void *y,
                           int incy, int copy) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (n <= 0) return CUBLAS_STATUS_SUCCESS; /* nothing to do, as cuBLAS */
    if ((!copy && !alpha) || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (incx < 0 || incy < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    static const float f1 = 1, f0 = 0;
    static const double d1 = 1, d0 = 0;
    const void *one = dbl ? (const void *)&d1 : (const void *)&f1, *zero = dbl ? (const void *)&d0 : (const void *)&f0;
    const void *a = copy ? one : alpha, *unit;
    int host_scalars = 1;
    if (!copy && h->pmode == CUBLAS_POINTER_MODE_DEVICE) {
        unit = alpha; /* the 1 x 1 factor, read by the GEMM in stream order */
        a = one;
    } else {
        CUdeviceptr u;
        if ((s = ones(h, &u)) != CUBLAS_STATUS_SUCCESS) return s;
        unit = (const void *)(uintptr_t)(u + (dbl ? 8 : 0));
    }
    if (dbl)
        return gemm_scalars(h, host_scalars, D_TYPES, CUBLAS_OP_N, CUBLAS_OP_N, 1, n, 1, a, unit, 1, 0, x, incx, 0,
                            copy ? zero : one, y, incy, 0, 1);
    return gemm_scalars(h, host_scalars, S_TYPES, CUBLAS_OP_N, CUBLAS_OP_N, 1, n, 1, a, unit, 1, 0, x, incx, 0,
                        copy ? zero : one, y, incy, 0, 1);
}

EXPORT cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float *alpha, const float *x, int incx, float *y,
                                     int incy) {
    return axpy(h, 0, n, alpha, x, incx, y, incy, 0);
}

EXPORT cublasStatus_t cublasDaxpy_v2(cublasHandle_t h, int n, const double *alpha, const double *x, int incx,
                                     double *y, int incy) {
    return axpy(h, 1, n, alpha, x, incx, y, incy, 0);
}

EXPORT cublasStatus_t cublasScopy_v2(cublasHandle_t h, int n, const float *x, int incx, float *y, int incy) {
    return axpy(h, 0, n, NULL, x, incx, y, incy, 1);
}

EXPORT cublasStatus_t cublasDcopy_v2(cublasHandle_t h, int n, const double *x, int incx, double *y, int incy) {
    return axpy(h, 1, n, NULL, x, incx, y, incy, 1);
}

/* ---- triangular solve and batched LU, remoted as themselves ----
 * trsm and getrfBatched go like GEMM, without waiting (arguments checked here first, as cuBLAS
 * checks them before launching); getrsBatched's info is a host output, so it waits for the
 * worker's answer. The arrays of matrix addresses stay in device memory: the worker's cuBLAS reads
 * them in stream order, as NVIDIA's does. */

static cublasStatus_t trsm(cublasHandle_t h, int dbl, cublasSideMode_t side, cublasFillMode_t uplo,
                           cublasOperation_t t, cublasDiagType_t diag, int m, int n, const void *alpha, const void *A,
                           int lda, void *B, int ldb) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    int k = side == CUBLAS_SIDE_LEFT ? m : n;
    if ((unsigned)side > CUBLAS_SIDE_RIGHT || (unsigned)uplo > CUBLAS_FILL_MODE_UPPER || (unsigned)t > CUBLAS_OP_C ||
        (unsigned)diag > CUBLAS_DIAG_UNIT || m < 0 || n < 0 || lda < (k > 1 ? k : 1) || ldb < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((s = flush_state(h)) != CUBLAS_STATUS_SUCCESS) return s;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS; /* nothing to solve */
    if (!alpha) return CUBLAS_STATUS_INVALID_VALUE;
    struct gw_blas_trsm g = {
        .handle = h->base.server, .dbl = (uint32_t)dbl, .side = (uint32_t)side, .uplo = (uint32_t)uplo,
        .trans = (uint32_t)t, .diag = (uint32_t)diag, .m = m, .n = n,
        .pointer_mode = h->pmode == CUBLAS_POINTER_MODE_DEVICE, .a = (uint64_t)(uintptr_t)A, .lda = lda,
        .b = (uint64_t)(uintptr_t)B, .ldb = ldb,
    };
    if (g.pointer_mode)
        g.alpha = (uint64_t)(uintptr_t)alpha;
    else /* the scalar's bytes, little-endian in the low bytes */
        memcpy(&g.alpha, alpha, dbl ? 8 : 4);
    ENCODE_CALL(blas_trsm, BLAS_TRSM, g, 1, NULL);
}

EXPORT cublasStatus_t cublasStrsm_v2(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                                     cublasOperation_t t, cublasDiagType_t diag, int m, int n, const float *alpha,
                                     const float *A, int lda, float *B, int ldb) {
    return trsm(h, 0, side, uplo, t, diag, m, n, alpha, A, lda, B, ldb);
}

EXPORT cublasStatus_t cublasDtrsm_v2(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                                     cublasOperation_t t, cublasDiagType_t diag, int m, int n, const double *alpha,
                                     const double *A, int lda, double *B, int ldb) {
    return trsm(h, 1, side, uplo, t, diag, m, n, alpha, A, lda, B, ldb);
}

/* The _64 forms: sizes past 32 bits are not remoted (the wire carries i32, as cuBLAS's own
 * kernels do for such sizes on most paths); negative ones are invalid as in the 32-bit form. */
static int fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

EXPORT cublasStatus_t cublasStrsm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                                        cublasOperation_t t, cublasDiagType_t diag, int64_t m, int64_t n,
                                        const float *alpha, const float *A, int64_t lda, float *B, int64_t ldb) {
    if (!fits32(m) || !fits32(n) || !fits32(lda) || !fits32(ldb))
        return m < 0 || n < 0 || lda < 0 || ldb < 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_SUPPORTED;
    return trsm(h, 0, side, uplo, t, diag, (int)m, (int)n, alpha, A, (int)lda, B, (int)ldb);
}

EXPORT cublasStatus_t cublasDtrsm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                                        cublasOperation_t t, cublasDiagType_t diag, int64_t m, int64_t n,
                                        const double *alpha, const double *A, int64_t lda, double *B, int64_t ldb) {
    if (!fits32(m) || !fits32(n) || !fits32(lda) || !fits32(ldb))
        return m < 0 || n < 0 || lda < 0 || ldb < 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_SUPPORTED;
    return trsm(h, 1, side, uplo, t, diag, (int)m, (int)n, alpha, A, (int)lda, B, (int)ldb);
}

/* The batch bound the worker enforces (backend.MaxBlasBatch). */
#define MAX_BLAS_BATCH (1 << 24)

static cublasStatus_t getrf_batched(cublasHandle_t h, int dbl, int n, const void *A, int lda, int *P, int *info,
                                    int batch) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (n < 0 || lda < (n > 1 ? n : 1) || batch < 0 || batch > MAX_BLAS_BATCH) return CUBLAS_STATUS_INVALID_VALUE;
    if (batch == 0) return CUBLAS_STATUS_SUCCESS;
    if (!A || !info) return CUBLAS_STATUS_INVALID_VALUE;
    if ((s = flush_state(h)) != CUBLAS_STATUS_SUCCESS) return s;
    struct gw_blas_getrf_batched g = {.handle = h->base.server, .dbl = (uint32_t)dbl, .n = n,
                                      .aarray = (uint64_t)(uintptr_t)A, .lda = lda, .pivots = (uint64_t)(uintptr_t)P,
                                      .info = (uint64_t)(uintptr_t)info, .batch = batch};
    ENCODE_CALL(blas_getrf_batched, BLAS_GETRF_BATCHED, g, 1, NULL);
}

EXPORT cublasStatus_t cublasSgetrfBatched(cublasHandle_t h, int n, float *const A[], int lda, int *P, int *info,
                                          int batch) {
    return getrf_batched(h, 0, n, A, lda, P, info, batch);
}

EXPORT cublasStatus_t cublasDgetrfBatched(cublasHandle_t h, int n, double *const A[], int lda, int *P, int *info,
                                          int batch) {
    return getrf_batched(h, 1, n, A, lda, P, info, batch);
}

/* getrsBatched: info (host) is 0, or -i when the i-th argument is bad (cuBLAS's convention);
 * the checks the worker makes again answer with its status. */
static cublasStatus_t getrs_batched(cublasHandle_t h, int dbl, cublasOperation_t t, int n, int nrhs, const void *A,
                                    int lda, const int *P, const void *B, int ldb, int *info, int batch) {
    cublasStatus_t s = check(h);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!info) return CUBLAS_STATUS_INVALID_VALUE;
    int bad = (unsigned)t > CUBLAS_OP_C ? 2 : n < 0 ? 3 : nrhs < 0 ? 4 : lda < (n > 1 ? n : 1) ? 6
            : ldb < (n > 1 ? n : 1) ? 9 : batch < 0 || batch > MAX_BLAS_BATCH ? 11 : 0;
    *info = -bad;
    if (bad) return CUBLAS_STATUS_INVALID_VALUE;
    if (batch == 0 || n == 0 || nrhs == 0) return CUBLAS_STATUS_SUCCESS;
    if (!A || !B) return *info = -(A ? 8 : 5), CUBLAS_STATUS_INVALID_VALUE;
    if ((s = flush_state(h)) != CUBLAS_STATUS_SUCCESS) return s;
    struct gw_blas_getrs_batched g = {.handle = h->base.server, .dbl = (uint32_t)dbl, .trans = (uint32_t)t, .n = n,
                                      .nrhs = nrhs, .aarray = (uint64_t)(uintptr_t)A, .lda = lda,
                                      .pivots = (uint64_t)(uintptr_t)P, .barray = (uint64_t)(uintptr_t)B, .ldb = ldb,
                                      .batch = batch};
    uint8_t buf[256];
    size_t len = gw_blas_getrs_batched_size(&g);
    if (len > sizeof buf) return CUBLAS_STATUS_INTERNAL_ERROR;
    gw_blas_getrs_batched_encode(&g, buf);
    s = session_call(GW_TYPE_BLAS_GETRS_BATCHED, buf, len, 0, NULL);
    if (s == CUBLAS_STATUS_INVALID_VALUE) *info = -1; /* the worker refused an argument it checks too */
    return s;
}

EXPORT cublasStatus_t cublasSgetrsBatched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs,
                                          const float *const A[], int lda, const int *P, float *const B[], int ldb,
                                          int *info, int batch) {
    return getrs_batched(h, 0, t, n, nrhs, A, lda, P, B, ldb, info, batch);
}

EXPORT cublasStatus_t cublasDgetrsBatched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs,
                                          const double *const A[], int lda, const int *P, double *const B[], int ldb,
                                          int *info, int batch) {
    return getrs_batched(h, 1, t, n, nrhs, A, lda, P, B, ldb, info, batch);
}

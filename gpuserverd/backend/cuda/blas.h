// The slice of NVIDIA's cuBLAS the cuda backend serves remoted cuBLAS calls with, loaded at run
// time (dlopen of libcublas.so.13, else .12) on the first handle a session creates, so gpuserverd
// builds and starts without the toolkit. cublasStatus_t is an int; handles are opaque pointers.
#ifndef GPUCLOUD_CUDA_BLAS_H
#define GPUCLOUD_CUDA_BLAS_H

#include "driver.h"

typedef void *cublasHandle_t;

// gc_blas_open loads libname and resolves the entry points: 0, or -1 with err filled. A library
// that exports gpucloud_cublas_guest is gpucloud's own guest library and is refused.
int gc_blas_open(const char *libname, char *err, size_t errlen);

// Each call first makes ctx current on the calling thread (cuBLAS works in the current context);
// a failure to do so is returned as CUBLAS_STATUS_INTERNAL_ERROR (14).
int gc_blas_create(CUcontext ctx, cublasHandle_t *h);
int gc_blas_destroy(CUcontext ctx, cublasHandle_t h);
int gc_blas_set_stream(CUcontext ctx, cublasHandle_t h, CUstream s);
int gc_blas_set_math_mode(CUcontext ctx, cublasHandle_t h, int mode);
int gc_blas_set_pointer_mode(CUcontext ctx, cublasHandle_t h, int mode);
int gc_blas_set_workspace(CUcontext ctx, cublasHandle_t h, CUdeviceptr p, size_t bytes);
// gc_gemm is one GEMM: ex 0 is cublas<t>gemm (atype 0, CUDA_R_32F: S; else D), 1 cublasGemmEx;
// batch > 1 the strided-batched form. alpha and beta are the scalars' bytes (little-endian), or
// with device_ptrs their device addresses (the handle must be in device pointer mode).
struct gc_gemm {
	int ex, atype, btype, ctype, compute, algo, ta, tb, m, n, k, lda, ldb, ldc, batch, device_ptrs;
	uint64_t alpha, beta;
	CUdeviceptr a, b, c;
	long long sa, sb, sc;
};
int gc_blas_gemm(CUcontext ctx, cublasHandle_t h, const struct gc_gemm *g);
// gc_trsm is one cublas<t>trsm_v2 (dbl 0: S, 1: D); alpha as gc_gemm's.
struct gc_trsm {
	int dbl, side, uplo, trans, diag, m, n, lda, ldb, device_ptrs;
	uint64_t alpha;
	CUdeviceptr a, b;
};
int gc_blas_trsm(CUcontext ctx, cublasHandle_t h, const struct gc_trsm *t);
// cublas<t>getrfBatched and getrsBatched: a and b are device arrays of device pointers; getrs's
// info is cuBLAS's host output.
int gc_blas_getrf_batched(CUcontext ctx, cublasHandle_t h, int dbl, int n, CUdeviceptr a, int lda, CUdeviceptr piv,
                          CUdeviceptr info, int batch);
int gc_blas_getrs_batched(CUcontext ctx, cublasHandle_t h, int dbl, int trans, int n, int nrhs, CUdeviceptr a, int lda,
                          CUdeviceptr piv, CUdeviceptr b, int ldb, int *info, int batch);

#endif

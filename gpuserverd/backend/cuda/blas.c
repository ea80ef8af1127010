// Run-time binding to NVIDIA's cuBLAS (see blas.h).
#include "blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CUBLAS_STATUS_INTERNAL_ERROR 14

#define BLAS_SYMBOLS(X)                                                                            \
	X(create, "cublasCreate_v2", int (*)(cublasHandle_t *))                                        \
	X(destroy, "cublasDestroy_v2", int (*)(cublasHandle_t))                                        \
	X(set_stream, "cublasSetStream_v2", int (*)(cublasHandle_t, CUstream))                         \
	X(set_math_mode, "cublasSetMathMode", int (*)(cublasHandle_t, int))                            \
	X(set_pointer_mode, "cublasSetPointerMode_v2", int (*)(cublasHandle_t, int))                   \
	X(set_workspace, "cublasSetWorkspace_v2", int (*)(cublasHandle_t, void *, size_t))             \
	X(sgemm, "cublasSgemm_v2",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,          \
	          const float *, int, const float *, float *, int))                                    \
	X(dgemm, "cublasDgemm_v2",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, const double *, const double *, int,        \
	          const double *, int, const double *, double *, int))                                 \
	X(sgemm_batched, "cublasSgemmStridedBatched",                                                  \
	  int (*)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,          \
	          long long, const float *, int, long long, const float *, float *, int, long long, int)) \
	X(dgemm_batched, "cublasDgemmStridedBatched",                                                  \
	  int (*)(cublasHandle_t, int, int, int, int, int, const double *, const double *, int,        \
	          long long, const double *, int, long long, const double *, double *, int, long long, \
	          int))

#define DECLARE(field, sym, type) __typeof__(type) field;
static struct {
	BLAS_SYMBOLS(DECLARE)
} bl;

int gc_blas_open(const char *libname, char *err, size_t errlen) {
	void *h = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	if (dlsym(h, "gpucloud_cublas_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libcublas, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
#define RESOLVE(field, sym, type)                                                                  \
	t.field = (__typeof__(type))dlsym(h, sym);                                                     \
	if (t.field == NULL) {                                                                         \
		snprintf(err, errlen, "%s: missing symbol %s", libname, sym);                              \
		dlclose(h);                                                                                \
		return -1;                                                                                 \
	}
	__typeof__(bl) t;
	memset(&t, 0, sizeof t);
	BLAS_SYMBOLS(RESOLVE)
	bl = t;
	return 0;
}

#define BOUND_BLAS(ctx, call)                                                                      \
	do {                                                                                           \
		if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;                                \
		return call;                                                                               \
	} while (0)

int gc_blas_create(CUcontext ctx, cublasHandle_t *h) { BOUND_BLAS(ctx, bl.create(h)); }
int gc_blas_destroy(CUcontext ctx, cublasHandle_t h) { BOUND_BLAS(ctx, bl.destroy(h)); }
int gc_blas_set_stream(CUcontext ctx, cublasHandle_t h, CUstream s) { BOUND_BLAS(ctx, bl.set_stream(h, s)); }
int gc_blas_set_math_mode(CUcontext ctx, cublasHandle_t h, int mode) {
	BOUND_BLAS(ctx, bl.set_math_mode(h, mode));
}
int gc_blas_set_pointer_mode(CUcontext ctx, cublasHandle_t h, int mode) {
	BOUND_BLAS(ctx, bl.set_pointer_mode(h, mode));
}
int gc_blas_set_workspace(CUcontext ctx, cublasHandle_t h, CUdeviceptr p, size_t bytes) {
	BOUND_BLAS(ctx, bl.set_workspace(h, (void *)(uintptr_t)p, bytes));
}

int gc_blas_gemm(CUcontext ctx, cublasHandle_t h, int dtype, int ta, int tb, int m, int n, int k,
                 uint64_t alpha, CUdeviceptr a, int lda, long long sa, CUdeviceptr b, int ldb,
                 long long sb, uint64_t beta, CUdeviceptr c, int ldc, long long sc, int batch,
                 int device_ptrs) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	if (dtype == 0) {
		const float *A = (const float *)(uintptr_t)a, *B = (const float *)(uintptr_t)b;
		float *C = (float *)(uintptr_t)c;
		uint32_t ab = (uint32_t)alpha, bb = (uint32_t)beta;
		float al, be;
		memcpy(&al, &ab, 4);
		memcpy(&be, &bb, 4);
		const float *pa = device_ptrs ? (const float *)(uintptr_t)alpha : &al;
		const float *pb = device_ptrs ? (const float *)(uintptr_t)beta : &be;
		if (batch == 1) return bl.sgemm(h, ta, tb, m, n, k, pa, A, lda, B, ldb, pb, C, ldc);
		return bl.sgemm_batched(h, ta, tb, m, n, k, pa, A, lda, sa, B, ldb, sb, pb, C, ldc, sc, batch);
	}
	const double *A = (const double *)(uintptr_t)a, *B = (const double *)(uintptr_t)b;
	double *C = (double *)(uintptr_t)c;
	double al, be;
	memcpy(&al, &alpha, 8);
	memcpy(&be, &beta, 8);
	const double *pa = device_ptrs ? (const double *)(uintptr_t)alpha : &al;
	const double *pb = device_ptrs ? (const double *)(uintptr_t)beta : &be;
	if (batch == 1) return bl.dgemm(h, ta, tb, m, n, k, pa, A, lda, B, ldb, pb, C, ldc);
	return bl.dgemm_batched(h, ta, tb, m, n, k, pa, A, lda, sa, B, ldb, sb, pb, C, ldc, sc, batch);
}

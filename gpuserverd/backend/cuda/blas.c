// Run-time binding to NVIDIA's cuBLAS (see blas.h).
#include "blas.h"

#include "dl.h"

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
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int,            \
	          const void *, int, const void *, void *, int))                                       \
	X(dgemm, "cublasDgemm_v2",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int,            \
	          const void *, int, const void *, void *, int))                                       \
	X(sgemm_batched, "cublasSgemmStridedBatched",                                                  \
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, long long, \
	          const void *, int, long long, const void *, void *, int, long long, int))            \
	X(dgemm_batched, "cublasDgemmStridedBatched",                                                  \
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, long long, \
	          const void *, int, long long, const void *, void *, int, long long, int))            \
	X(gemm_ex, "cublasGemmEx",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,       \
	          const void *, int, int, const void *, void *, int, int, int, int))                   \
	X(gemm_ex_batched, "cublasGemmStridedBatchedEx",                                               \
	  int (*)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,       \
	          long long, const void *, int, int, long long, const void *, void *, int, int,        \
	          long long, int, int, int))                                                   \
	X(strsm, "cublasStrsm_v2",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, int, const void *, const void *, int, void *, \
	          int))                                                                                \
	X(dtrsm, "cublasDtrsm_v2",                                                                     \
	  int (*)(cublasHandle_t, int, int, int, int, int, int, const void *, const void *, int, void *, \
	          int))                                                                                \
	X(sgetrf_batched, "cublasSgetrfBatched", int (*)(cublasHandle_t, int, void *, int, int *, int *, int)) \
	X(dgetrf_batched, "cublasDgetrfBatched", int (*)(cublasHandle_t, int, void *, int, int *, int *, int)) \
	X(sgetrs_batched, "cublasSgetrsBatched",                                                       \
	  int (*)(cublasHandle_t, int, int, int, const void *, int, const int *, void *, int, int *, int)) \
	X(dgetrs_batched, "cublasDgetrsBatched",                                                       \
	  int (*)(cublasHandle_t, int, int, int, const void *, int, const int *, void *, int, int *, int))

static struct {
	BLAS_SYMBOLS(GC_DL_DECLARE)
} bl;

int gc_blas_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	if (dlsym(h, "gpucloud_cublas_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libcublas, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
	__typeof__(bl) t;
	memset(&t, 0, sizeof t);
	BLAS_SYMBOLS(GC_DL_RESOLVE)
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

int gc_blas_gemm(CUcontext ctx, cublasHandle_t h, const struct gc_gemm *g) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	// Host scalars: their bytes, little-endian, at the start of a word here.
	uint64_t al = g->alpha, be = g->beta;
	const void *pa = g->device_ptrs ? (const void *)(uintptr_t)g->alpha : (const void *)&al;
	const void *pb = g->device_ptrs ? (const void *)(uintptr_t)g->beta : (const void *)&be;
	const void *A = (const void *)(uintptr_t)g->a, *B = (const void *)(uintptr_t)g->b;
	void *C = (void *)(uintptr_t)g->c;
	if (g->ex) {
		if (g->batch == 1)
			return bl.gemm_ex(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->atype, g->lda, B, g->btype, g->ldb, pb, C,
			                  g->ctype, g->ldc, g->compute, g->algo);
		return bl.gemm_ex_batched(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->atype, g->lda, g->sa, B, g->btype,
		                          g->ldb, g->sb, pb, C, g->ctype, g->ldc, g->sc, g->batch, g->compute, g->algo);
	}
	if (g->atype == 0) { // CUDA_R_32F: SGEMM
		if (g->batch == 1)
			return bl.sgemm(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->lda, B, g->ldb, pb, C, g->ldc);
		return bl.sgemm_batched(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->lda, g->sa, B, g->ldb, g->sb, pb, C,
		                        g->ldc, g->sc, g->batch);
	}
	if (g->batch == 1) return bl.dgemm(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->lda, B, g->ldb, pb, C, g->ldc);
	return bl.dgemm_batched(h, g->ta, g->tb, g->m, g->n, g->k, pa, A, g->lda, g->sa, B, g->ldb, g->sb, pb, C, g->ldc,
	                        g->sc, g->batch);
}

int gc_blas_trsm(CUcontext ctx, cublasHandle_t h, const struct gc_trsm *t) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	uint64_t al = t->alpha;
	const void *pa = t->device_ptrs ? (const void *)(uintptr_t)t->alpha : (const void *)&al;
	const void *A = (const void *)(uintptr_t)t->a;
	void *B = (void *)(uintptr_t)t->b;
	if (t->dbl) return bl.dtrsm(h, t->side, t->uplo, t->trans, t->diag, t->m, t->n, pa, A, t->lda, B, t->ldb);
	return bl.strsm(h, t->side, t->uplo, t->trans, t->diag, t->m, t->n, pa, A, t->lda, B, t->ldb);
}

int gc_blas_getrf_batched(CUcontext ctx, cublasHandle_t h, int dbl, int n, CUdeviceptr a, int lda, CUdeviceptr piv,
                          CUdeviceptr info, int batch) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	void *A = (void *)(uintptr_t)a;
	int *P = (int *)(uintptr_t)piv, *I = (int *)(uintptr_t)info;
	if (dbl) return bl.dgetrf_batched(h, n, A, lda, P, I, batch);
	return bl.sgetrf_batched(h, n, A, lda, P, I, batch);
}

int gc_blas_getrs_batched(CUcontext ctx, cublasHandle_t h, int dbl, int trans, int n, int nrhs, CUdeviceptr a, int lda,
                          CUdeviceptr piv, CUdeviceptr b, int ldb, int *info, int batch) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	const void *A = (const void *)(uintptr_t)a;
	const int *P = (const int *)(uintptr_t)piv;
	void *B = (void *)(uintptr_t)b;
	if (dbl) return bl.dgetrs_batched(h, trans, n, nrhs, A, lda, P, B, ldb, info, batch);
	return bl.sgetrs_batched(h, trans, n, nrhs, A, lda, P, B, ldb, info, batch);
}

// Run-time binding to NVIDIA's cuBLASLt (see lt.h).
#include "lt.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CUBLAS_STATUS_INVALID_VALUE 7
#define CUBLAS_STATUS_INTERNAL_ERROR 14

#define LT_SYMBOLS(X)                                                                                      \
	X(create, "cublasLtCreate", int (*)(cublasLtHandle_t *))                                               \
	X(destroy, "cublasLtDestroy", int (*)(cublasLtHandle_t))                                               \
	X(desc_create, "cublasLtMatmulDescCreate", int (*)(void **, int, int))                                 \
	X(desc_destroy, "cublasLtMatmulDescDestroy", int (*)(void *))                                          \
	X(desc_set, "cublasLtMatmulDescSetAttribute", int (*)(void *, int, const void *, size_t))              \
	X(desc_get, "cublasLtMatmulDescGetAttribute", int (*)(void *, int, void *, size_t, size_t *))          \
	X(layout_create, "cublasLtMatrixLayoutCreate", int (*)(void **, int, uint64_t, uint64_t, int64_t))     \
	X(layout_destroy, "cublasLtMatrixLayoutDestroy", int (*)(void *))                                      \
	X(layout_set, "cublasLtMatrixLayoutSetAttribute", int (*)(void *, int, const void *, size_t))          \
	X(layout_get, "cublasLtMatrixLayoutGetAttribute", int (*)(void *, int, void *, size_t, size_t *))      \
	X(pref_create, "cublasLtMatmulPreferenceCreate", int (*)(void **))                                     \
	X(pref_destroy, "cublasLtMatmulPreferenceDestroy", int (*)(void *))                                    \
	X(pref_set, "cublasLtMatmulPreferenceSetAttribute", int (*)(void *, int, const void *, size_t))        \
	X(pref_get, "cublasLtMatmulPreferenceGetAttribute", int (*)(void *, int, void *, size_t, size_t *))    \
	X(heuristic, "cublasLtMatmulAlgoGetHeuristic",                                                         \
	  int (*)(cublasLtHandle_t, void *, void *, void *, void *, void *, void *, int, struct gc_lt_result *, \
	          int *))                                                                                      \
	X(matmul, "cublasLtMatmul",                                                                            \
	  int (*)(cublasLtHandle_t, void *, const void *, const void *, void *, const void *, void *,          \
	          const void *, const void *, void *, void *, void *, const void *, void *, size_t, CUstream))

static struct {
	LT_SYMBOLS(GC_DL_DECLARE)
} lt;

int gc_lt_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	if (dlsym(h, "gpucloud_cublaslt_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libcublasLt, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
	__typeof__(lt) t;
	memset(&t, 0, sizeof t);
	LT_SYMBOLS(GC_DL_RESOLVE)
	lt = t;
	return 0;
}

int gc_lt_create(CUcontext ctx, cublasLtHandle_t *h) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	return lt.create(h);
}

int gc_lt_destroy(CUcontext ctx, cublasLtHandle_t h) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	return lt.destroy(h);
}

int gc_lt_new(int kind, void **obj, int type, int scale, uint64_t rows, uint64_t cols, int64_t ld) {
	switch (kind) {
	case 0: return lt.desc_create(obj, type, scale);
	case 1: return lt.layout_create(obj, type, rows, cols, ld);
	case 2: return lt.pref_create(obj);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

int gc_lt_free(int kind, void *obj) {
	switch (kind) {
	case 0: return lt.desc_destroy(obj);
	case 1: return lt.layout_destroy(obj);
	case 2: return lt.pref_destroy(obj);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

int gc_lt_set(int kind, void *obj, int attr, const void *buf, size_t n) {
	switch (kind) {
	case 0: return lt.desc_set(obj, attr, buf, n);
	case 1: return lt.layout_set(obj, attr, buf, n);
	case 2: return lt.pref_set(obj, attr, buf, n);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

int gc_lt_get(int kind, void *obj, int attr, void *buf, size_t n, size_t *written) {
	switch (kind) {
	case 0: return lt.desc_get(obj, attr, buf, n, written);
	case 1: return lt.layout_get(obj, attr, buf, n, written);
	case 2: return lt.pref_get(obj, attr, buf, n, written);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

int gc_lt_heuristic(CUcontext ctx, cublasLtHandle_t h, void *desc, void *a, void *b, void *c, void *d, void *pref,
                    int requested, struct gc_lt_result *out, int *count) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	return lt.heuristic(h, desc, a, b, c, d, pref, requested, out, count);
}

int gc_lt_matmul(CUcontext ctx, cublasLtHandle_t h, void *desc, uintptr_t alpha, CUdeviceptr A, void *a,
                 CUdeviceptr B, void *b, uintptr_t beta, CUdeviceptr C, void *c, CUdeviceptr D, void *d,
                 const uint64_t *algo, CUdeviceptr workspace, size_t workspace_size, CUstream stream) {
	if (gc_bind(ctx) != 0) return CUBLAS_STATUS_INTERNAL_ERROR;
	return lt.matmul(h, desc, (const void *)alpha, (const void *)(uintptr_t)A, a, (const void *)(uintptr_t)B, b,
	                 (const void *)beta,
	                 (const void *)(uintptr_t)C, c, (void *)(uintptr_t)D, d, algo, (void *)(uintptr_t)workspace,
	                 workspace_size, stream);
}

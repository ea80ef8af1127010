// The slice of NVIDIA's cuBLASLt the cuda backend serves remoted cuBLASLt calls with, loaded at
// run time (dlopen of libcublasLt.so.13, else .12) after cuBLAS, so the two are one instance
// (NVIDIA's libcublas links its cuBLASLt) and a cuBLAS handle serves as a cuBLASLt handle.
#ifndef GPUCLOUD_CUDA_LT_H
#define GPUCLOUD_CUDA_LT_H

#include "driver.h"

typedef void *cublasLtHandle_t;

// gc_lt_open loads libname and resolves the entry points: 0, or -1 with err filled. gpucloud's
// own guest libcublasLt (it exports gpucloud_cublaslt_guest) is refused.
int gc_lt_open(const char *libname, char *err, size_t errlen);

// Handles; each call makes ctx current first (CUBLAS_STATUS_INTERNAL_ERROR, 14, if it cannot).
int gc_lt_create(CUcontext ctx, cublasLtHandle_t *h);
int gc_lt_destroy(CUcontext ctx, cublasLtHandle_t h);

// Objects (kind 0: matmul descriptor, 1: matrix layout, 2: preference), host-side structures.
// gc_lt_new takes the create call's arguments: a descriptor's compute and scale types
// (type, scale), a layout's type, rows, cols and ld; a preference none.
int gc_lt_new(int kind, void **obj, int type, int scale, uint64_t rows, uint64_t cols, int64_t ld);
int gc_lt_free(int kind, void *obj);
int gc_lt_set(int kind, void *obj, int attr, const void *buf, size_t n);
int gc_lt_get(int kind, void *obj, int attr, void *buf, size_t n, size_t *written);

// A heuristic result as cublasLt.h lays it out (cublasLtMatmulHeuristicResult_t).
struct gc_lt_result {
	uint64_t algo[8];
	size_t workspace;
	int state;
	float waves;
	int reserved[4];
};
int gc_lt_heuristic(CUcontext ctx, cublasLtHandle_t h, void *desc, void *a, void *b, void *c, void *d, void *pref,
                    int requested, struct gc_lt_result *out, int *count);

// gc_lt_matmul: alpha and beta are the scalars' addresses (here, or on the device); algo NULL lets
// cuBLASLt choose.
int gc_lt_matmul(CUcontext ctx, cublasLtHandle_t h, void *desc, uintptr_t alpha, CUdeviceptr A, void *a,
                 CUdeviceptr B, void *b, uintptr_t beta, CUdeviceptr C, void *c, CUdeviceptr D, void *d,
                 const uint64_t *algo, CUdeviceptr workspace, size_t workspace_size, CUstream stream);

#endif

/* A test double of the CUDA toolkit's cublasXt.h: the declarations gpucloud's libcublas (xt.c)
 * implements, so CI (no toolkit) can build it; values are NVIDIA's. Nothing here is shipped. */
#ifndef GPUCLOUD_TEST_CUBLAS_XT_H
#define GPUCLOUD_TEST_CUBLAS_XT_H
#include "cublas_v2.h"

struct cublasXtContext;
typedef struct cublasXtContext *cublasXtHandle_t;
typedef enum { CUBLASXT_PINNING_DISABLED = 0, CUBLASXT_PINNING_ENABLED = 1 } cublasXtPinnedMemMode_t;
typedef enum { CUBLASXT_FLOAT = 0, CUBLASXT_DOUBLE = 1, CUBLASXT_COMPLEX = 2, CUBLASXT_DOUBLECOMPLEX = 3 } cublasXtOpType_t;
typedef enum { CUBLASXT_GEMM = 0, CUBLASXT_ROUTINE_MAX = 12 } cublasXtBlasOp_t;

cublasStatus_t cublasXtCreate(cublasXtHandle_t *handle);
cublasStatus_t cublasXtDestroy(cublasXtHandle_t handle);
cublasStatus_t cublasXtGetNumBoards(int nbDevices, int deviceId[], int *nbBoards);
cublasStatus_t cublasXtMaxBoards(int *nbGpuBoards);
cublasStatus_t cublasXtDeviceSelect(cublasXtHandle_t handle, int nbDevices, int deviceId[]);
cublasStatus_t cublasXtSetBlockDim(cublasXtHandle_t handle, int blockDim);
cublasStatus_t cublasXtGetBlockDim(cublasXtHandle_t handle, int *blockDim);
cublasStatus_t cublasXtGetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t *mode);
cublasStatus_t cublasXtSetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t mode);
cublasStatus_t cublasXtSetCpuRoutine(cublasXtHandle_t handle, cublasXtBlasOp_t blasOp, cublasXtOpType_t type,
                                     void *blasFunctor);
cublasStatus_t cublasXtSetCpuRatio(cublasXtHandle_t handle, cublasXtBlasOp_t blasOp, cublasXtOpType_t type,
                                   float ratio);
cublasStatus_t cublasXtSgemm(cublasXtHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, size_t m,
                             size_t n, size_t k, const float *alpha, const float *A, size_t lda, const float *B,
                             size_t ldb, const float *beta, float *C, size_t ldc);
cublasStatus_t cublasXtDgemm(cublasXtHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, size_t m,
                             size_t n, size_t k, const double *alpha, const double *A, size_t lda, const double *B,
                             size_t ldb, const double *beta, double *C, size_t ldc);
#endif

/* What the files of gpucloud's libcufft.so.12 share (session.c, plans.c, calls_gen.c). It needs
 * no NVIDIA header: its functions take void * for pointers and handles, int for enums. */
#ifndef GPUCLOUD_CUFFT_INTERNAL_H
#define GPUCLOUD_CUFFT_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* cufftResult codes this library produces. */
#define CUFFT_SUCCESS 0
#define CUFFT_INVALID_PLAN 1
#define CUFFT_ALLOC_FAILED 2
#define CUFFT_INVALID_VALUE 4
#define CUFFT_INTERNAL_ERROR 5
#define CUFFT_SETUP_FAILED 7
#define CUFFT_INVALID_SIZE 8
#define CUFFT_NOT_SUPPORTED 16

#define GC_LIB_INVALID CUFFT_INVALID_VALUE
#define GC_SCALAR(h, p, t, hb, w) (-1) /* cuFFT has no scalars */

/* The remoting functions of calls_gen.c the plan helpers build on. */
int gcr_cufftCreate(void *plan);
int gcr_cufftDestroy(int plan);
int gcr_cufftMakePlanMany64(int plan, int rank, void *n, void *inembed, int64_t istride, int64_t idist, void *onembed,
                            int64_t ostride, int64_t odist, int type, int64_t batch, void *workSize);
int gcr_cufftGetSizeMany64(int plan, int rank, void *n, void *inembed, int64_t istride, int64_t idist, void *onembed,
                           int64_t ostride, int64_t odist, int type, int64_t batch, void *workSize);
int gcr_cufftEstimateMany(int rank, void *n, void *inembed, int istride, int idist, void *onembed, int ostride, int odist,
                          int type, int batch, void *workSize);

#endif

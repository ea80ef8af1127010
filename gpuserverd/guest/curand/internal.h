/* What the files of gpucloud's libcurand.so.10 share (session.c, calls_gen.c). It needs no NVIDIA
 * header: its functions take void * for pointers and handles, int for enums. */
#ifndef GPUCLOUD_CURAND_INTERNAL_H
#define GPUCLOUD_CURAND_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* curandStatus_t codes this library produces. */
#define CURAND_STATUS_SUCCESS 0
#define CURAND_STATUS_ALLOCATION_FAILED 102
#define CURAND_STATUS_OUT_OF_RANGE 104
#define CURAND_STATUS_LAUNCH_FAILURE 201
#define CURAND_STATUS_INITIALIZATION_FAILED 203
#define CURAND_STATUS_INTERNAL_ERROR 999

#define GC_LIB_INVALID CURAND_STATUS_OUT_OF_RANGE
#define GC_SCALAR(h, p, t, hb, w) (-1) /* cuRAND's host API has no scalars */

/* RandTable (session.c): one of cuRAND's host tables, its size and, to dst, its first bytes. */
int gc_rand_table_request(uint32_t table, uint64_t dst, uint64_t bytes, uint64_t *size);

/* The remoting definitions (calls_gen.c) that host.c's hand-written ones call. */
int gcr_curandCreateGenerator(void *generator, int rng_type);
int gcr_curandDestroyGenerator(void *generator);
int gcr_curandGenerate(void *generator, void *outputPtr, uint64_t num);
int gcr_curandGenerateLongLong(void *generator, void *outputPtr, uint64_t num);
int gcr_curandGenerateUniform(void *generator, void *outputPtr, uint64_t num);
int gcr_curandGenerateUniformDouble(void *generator, void *outputPtr, uint64_t num);
int gcr_curandGenerateNormal(void *generator, void *outputPtr, uint64_t n, float mean, float stddev);
int gcr_curandGenerateNormalDouble(void *generator, void *outputPtr, uint64_t n, double mean, double stddev);
int gcr_curandGenerateLogNormal(void *generator, void *outputPtr, uint64_t n, float mean, float stddev);
int gcr_curandGenerateLogNormalDouble(void *generator, void *outputPtr, uint64_t n, double mean, double stddev);
int gcr_curandGeneratePoisson(void *generator, void *outputPtr, uint64_t n, double lambda);
int gcr_curandGeneratePoissonMethod(void *generator, void *outputPtr, uint64_t n, double lambda, int method);
int gcr_curandGenerateBinomial(void *generator, void *outputPtr, uint64_t num, uint32_t n, double p);
int gcr_curandGenerateBinomialMethod(void *generator, void *outputPtr, uint64_t num, uint32_t n, double p, int method);

#endif

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
#define CURAND_STATUS_OUT_OF_RANGE 104
#define CURAND_STATUS_INITIALIZATION_FAILED 203
#define CURAND_STATUS_INTERNAL_ERROR 999

#define GC_LIB_INVALID CURAND_STATUS_OUT_OF_RANGE
#define GC_SCALAR(h, p, t, hb, w) (-1) /* cuRAND's host API has no scalars */

#endif

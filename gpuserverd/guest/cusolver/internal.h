/* What the files of gpucloud's libcusolver.so.12 share (session.c, calls_gen.c). It needs no
 * NVIDIA header: its functions take void * for pointers and handles, int for enums. */
#ifndef GPUCLOUD_CUSOLVER_INTERNAL_H
#define GPUCLOUD_CUSOLVER_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* cusolverStatus_t codes this library produces (cusolver_common.h). */
#define CUSOLVER_STATUS_SUCCESS 0
#define CUSOLVER_STATUS_NOT_INITIALIZED 1
#define CUSOLVER_STATUS_ALLOC_FAILED 2
#define CUSOLVER_STATUS_INVALID_VALUE 3
#define CUSOLVER_STATUS_INTERNAL_ERROR 7
#define CUSOLVER_STATUS_NOT_SUPPORTED 9

#define GC_LIB_INVALID CUSOLVER_STATUS_INVALID_VALUE
#define GC_LIB_ALLOC CUSOLVER_STATUS_ALLOC_FAILED

#endif

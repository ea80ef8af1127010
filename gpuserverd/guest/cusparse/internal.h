/* What the files of gpucloud's libcusparse.so.12 share (session.c, calls_gen.c). It needs no
 * NVIDIA header: its functions take void * for pointers and handles, int for enums. */
#ifndef GPUCLOUD_CUSPARSE_INTERNAL_H
#define GPUCLOUD_CUSPARSE_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* cusparseStatus_t codes this library produces. */
#define CUSPARSE_STATUS_SUCCESS 0
#define CUSPARSE_STATUS_NOT_INITIALIZED 1
#define CUSPARSE_STATUS_INVALID_VALUE 3
#define CUSPARSE_STATUS_INTERNAL_ERROR 7

#define GC_LIB_INVALID CUSPARSE_STATUS_INVALID_VALUE

/* gc_sp_scalar puts a scalar (alpha, beta) of computeType into the call: its bytes when handle's
 * pointer mode is the host's, else its device address. */
int gc_sp_scalar(void *handle, const void *p, int computeType, struct gc_host *hb, uint64_t *w);
#define GC_SCALAR(h, p, t, hb, w) gc_sp_scalar((h), (p), (t), (hb), (w))

#endif

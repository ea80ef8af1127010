/* What the files of gpucloud's libnvjpeg.so.13 share (session.c, calls_gen.c). It needs no NVIDIA
 * header: its functions take void * for pointers and handles, int for enums. */
#ifndef GPUCLOUD_NVJPEG_INTERNAL_H
#define GPUCLOUD_NVJPEG_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* nvjpegStatus_t codes this library produces (nvjpeg.h). */
#define NVJPEG_STATUS_SUCCESS 0
#define NVJPEG_STATUS_NOT_INITIALIZED 1
#define NVJPEG_STATUS_INVALID_PARAMETER 2
#define NVJPEG_STATUS_ALLOCATOR_FAILURE 5
#define NVJPEG_STATUS_INTERNAL_ERROR 8
#define NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED 9

#define GC_LIB_INVALID NVJPEG_STATUS_INVALID_PARAMETER
#define GC_LIB_ALLOC NVJPEG_STATUS_ALLOCATOR_FAILURE

#endif

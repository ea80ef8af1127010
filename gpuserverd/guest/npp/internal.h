/* What the files of gpucloud's NPP libraries share (session.c, the *_gen.c files, core.c,
 * support.c). They need no NVIDIA header: sigs_gen.h declares NPP's structs passed by value
 * (generated from the layouts apigen recorded from nppdefs.h), every other pointer is void *. */
#ifndef GPUCLOUD_NPP_INTERNAL_H
#define GPUCLOUD_NPP_INTERNAL_H
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"
#include "../include/gpucloud_table.h"
#include "../include/gpucloud_libcall.h"

#define EXPORT __attribute__((visibility("default")))

/* NppStatus codes this library produces (nppdefs.h). */
#define NPP_NO_ERROR 0
#define NPP_NOT_SUPPORTED_MODE_ERROR (-9999)
#define NPP_CUDA_KERNEL_EXECUTION_ERROR (-1000)
#define NPP_MEMORY_ALLOCATION_ERR (-9)
#define NPP_NULL_POINTER_ERROR (-8)
#define NPP_BAD_ARGUMENT_ERROR (-5)

#define GC_LIB_INVALID NPP_BAD_ARGUMENT_ERROR
#define GC_LIB_ALLOC NPP_MEMORY_ALLOCATION_ERR

/* gc_npp_ctx appends an NppStreamContext's bytes to a call's host bytes, its stream (the first
 * member, cudaStream_t hStream) replaced by the server's handle of it (session.c). */
int gc_npp_ctx(struct gc_host *hb, const void *ctx, uint64_t *w);

/* gc_npp_send makes one call of a remoted function (session.c; the sigs_gen.h macros call it). */
int gc_npp_send(uint32_t id, const char *kinds, uint64_t *w, const void *const *p, int n);

#endif

// Run-time binding to NVIDIA's NCCL (dlopen of libnccl.so.2 on a session's first unique id or
// communicator), so gpuserverd builds without it and serves sessions that never use NCCL on a
// server without it. See docs/multi-gpu.md.
#ifndef GPUCLOUD_CUDA_NCCL_H
#define GPUCLOUD_CUDA_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

#define GC_NCCL_ID_BYTES 128

// gc_nccl_open loads libname; -1 with the reason in err (a missing symbol, or gpucloud's own guest
// libnccl, which would forward the worker's calls to itself).
int gc_nccl_open(const char *libname, char *err, size_t errlen);
// Each returns an ncclResult_t.
int gc_nccl_unique_id(unsigned char id[GC_NCCL_ID_BYTES]);
// gc_nccl_init_rank makes rank of nranks in ctx (made current first, as NCCL takes the current
// device).
int gc_nccl_init_rank(CUcontext ctx, void **comm, int nranks, const unsigned char id[GC_NCCL_ID_BYTES], int rank);
int gc_nccl_group_start(void);
int gc_nccl_group_end(void);
// gc_nccl_post queues one rank's part (kind as backend.CollectiveOp's) on stream s of ctx.
int gc_nccl_post(CUcontext ctx, void *comm, int kind, uint64_t send, uint64_t recv, size_t count, int datatype, int op,
                 int peer, CUstream s);
// gc_nccl_comm: what 0 ncclCommGetAsyncError (into *async), 1 ncclCommFinalize, 2 ncclCommDestroy,
// 3 ncclCommAbort.
int gc_nccl_comm(CUcontext ctx, void *comm, int what, int *async);
// gc_nccl_premul is ncclRedOpCreatePreMulSum of the value at host, or with host NULL of the value
// at device address dev; gc_nccl_redop_destroy is ncclRedOpDestroy.
int gc_nccl_premul(CUcontext ctx, void *comm, int *op, void *host, uint64_t dev, int datatype);
int gc_nccl_redop_destroy(CUcontext ctx, void *comm, int op);
// gc_nccl_split is ncclCommSplit (default config) with the new communicator's rank and size;
// *out NULL for a rank of no color.
int gc_nccl_split(CUcontext ctx, void *comm, int color, int key, void **out, int *rank, int *nranks);
const char *gc_nccl_error_string(int result);

#endif

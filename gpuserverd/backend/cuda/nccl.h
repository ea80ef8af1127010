// Run-time binding to NVIDIA's NCCL (dlopen of libnccl.so.2 on a session's first communicator),
// so gpuserverd builds without it and serves sessions that never use NCCL on a server without it.
// Written for issue 19 and NOT yet run on GPUs (no multi-GPU machine was lent): see
// docs/multi-gpu.md.
#ifndef GPUCLOUD_CUDA_NCCL_H
#define GPUCLOUD_CUDA_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

// gc_nccl_open loads libname; -1 with the reason in err (a missing symbol, or gpucloud's own guest
// libnccl, which would forward the worker's calls to itself).
int gc_nccl_open(const char *libname, char *err, size_t errlen);
// gc_nccl_init_all makes n communicators, rank i on devs[i] (ncclCommInitAll); an ncclResult_t.
int gc_nccl_init_all(void **comms, int n, const int *devs);
int gc_nccl_destroy(void *comm);
// gc_nccl_run runs one collective (kind as backend.Collective's) as one NCCL group: rank i's part
// on ctxs[i] and streams[i]; an ncclResult_t.
int gc_nccl_run(int kind, int n, void **comms, CUcontext *ctxs, CUstream *streams, const uint64_t *send,
                const uint64_t *recv, size_t count, int datatype, int op, int root);
const char *gc_nccl_error_string(int result);

#endif

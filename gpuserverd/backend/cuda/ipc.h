// The driver calls of IPC between an instance's processes (issue 14; ipc.go), resolved from the
// loaded driver on first use like families.h's: a driver without one answers
// CUDA_ERROR_NOT_SUPPORTED (801). Handles are NVIDIA's 64 bytes; shareable handles POSIX fds.
#ifndef GPUCLOUD_CUDA_IPC_H
#define GPUCLOUD_CUDA_IPC_H

#include "families.h"

#define GC_IPC_HANDLE_SIZE 64

CUresult gc_ipc_get_mem(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUdeviceptr p);
CUresult gc_ipc_open_mem(CUcontext ctx, CUdeviceptr *p, const unsigned char h[GC_IPC_HANDLE_SIZE], unsigned flags);
CUresult gc_ipc_close_mem(CUcontext ctx, CUdeviceptr p);
CUresult gc_ipc_get_event(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUevent e);
CUresult gc_ipc_open_event(CUcontext ctx, CUevent *e, const unsigned char h[GC_IPC_HANDLE_SIZE]);
CUresult gc_mem_export_fd(CUcontext ctx, int *fd, unsigned long long h);
CUresult gc_mem_import_fd(CUcontext ctx, unsigned long long *h, int fd);
CUresult gc_pool_export_fd(CUcontext ctx, int *fd, CUmemoryPool pool);
CUresult gc_pool_import_fd(CUcontext ctx, CUmemoryPool *pool, int fd);
CUresult gc_pool_export_ptr(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUdeviceptr p);
CUresult gc_pool_import_ptr(CUcontext ctx, CUdeviceptr *p, CUmemoryPool pool, const unsigned char d[GC_IPC_HANDLE_SIZE]);
CUresult gc_pool_get_access(CUcontext ctx, unsigned *flags, CUmemoryPool pool, unsigned loc_type, int loc_id);
CUresult gc_pool_set_access(CUcontext ctx, CUmemoryPool pool, unsigned loc_type, int loc_id, unsigned flags);

#endif

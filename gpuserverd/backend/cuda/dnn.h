// The slice of NVIDIA's cuDNN the cuda backend serves remoted cuDNN calls with, loaded at run
// time (dlopen of libcudnn.so.9) on a session's first handle or descriptor, so gpuserverd builds
// and starts without cuDNN. cudnnStatus_t is an int; handles and descriptors opaque pointers.
#ifndef GPUCLOUD_CUDA_DNN_H
#define GPUCLOUD_CUDA_DNN_H

#include "driver.h"

#include <stdint.h>

typedef void *cudnnHandle_t;
typedef void *cudnnBackendDescriptor_t;

// gc_dnn_open loads libname and resolves the entry points: 0, or -1 with err filled. A library
// that exports gpucloud_cudnn_guest is gpucloud's own guest library and is refused.
int gc_dnn_open(const char *libname, char *err, size_t errlen);

// Each call first makes ctx current on the calling thread; a failure to do so is returned as
// CUDNN_STATUS_INTERNAL_ERROR (4000).
int gc_dnn_create(CUcontext ctx, cudnnHandle_t *h);
int gc_dnn_destroy(CUcontext ctx, cudnnHandle_t h);
int gc_dnn_set_stream(CUcontext ctx, cudnnHandle_t h, CUstream s);
int gc_dnn_desc_create(CUcontext ctx, int type, cudnnBackendDescriptor_t *d);
int gc_dnn_desc_destroy(CUcontext ctx, cudnnBackendDescriptor_t d);
// elems: count elements of the type, ids already replaced by real pointers.
int gc_dnn_set_attr(CUcontext ctx, cudnnBackendDescriptor_t d, int name, int type, int64_t count, const void *elems);
int gc_dnn_get_attr(CUcontext ctx, cudnnBackendDescriptor_t d, int name, int type, int64_t requested, int64_t *count,
                    void *elems);
int gc_dnn_finalize(CUcontext ctx, cudnnBackendDescriptor_t d);
int gc_dnn_execute(CUcontext ctx, cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack);

// gc_dnn_legacy runs one legacy call (backend.DnnOp*): ndesc descriptors of 32 words
// (backend.DnnDesc) and nargs argument words, in the order backend/dnn.go gives; value and data
// receive its number and algorithm results.
int gc_dnn_legacy(CUcontext ctx, cudnnHandle_t h, int op, const int32_t *descs, int ndesc, const uint64_t *args, int nargs,
                  uint64_t *value, uint64_t *data);

#endif

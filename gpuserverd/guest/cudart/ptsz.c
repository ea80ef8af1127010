/* The per-thread-default-stream forms (_ptsz, _ptds) of this library's runtime functions, which
 * a program built with --default-stream per-thread (or CUDA_API_PER_THREAD_DEFAULT_STREAM) calls:
 * a _ptsz form's NULL stream is the calling thread's per-thread default stream
 * (cudaStreamPerThread, a stream of its own in the worker); a _ptds form (synchronous, no stream)
 * is the legacy form, ordered at least as strictly. Forms of functions this library does not
 * offer stay refused (stubs_gen.c). */
#include "internal.h"

/* Forwarding to the deprecated forms (cudaMemcpyToArray ...) is the point. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* The forms forwarded to, as this library defines them (checked against NVIDIA's declarations
 * when built with the toolkit's headers; CI's stand-in header does not declare them). */
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args);
cudaError_t cudaLaunchKernel(const void *host, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t x, size_t y, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t s);
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t x, size_t y, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t x, size_t y, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s);
cudaError_t cudaMemset2D(void *p, size_t pitch, int v, size_t width, size_t height);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id, cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *ndeps);
cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned *flags);
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *prio);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);

EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned flags) {
    return cudaEventRecordWithFlags(e, s ? s : cudaStreamPerThread, flags);
}

EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
    return cudaEventRecord(e, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) {
    return cudaFreeAsync(p, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn, unsigned version, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, version, flags ? flags : cudaEnablePerThreadDefaultStream, status);
}

EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
    return cudaGetDriverEntryPoint(symbol, fn, flags ? flags : cudaEnablePerThreadDefaultStream, status);
}

EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) {
    return cudaGraphLaunch(exec, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s) {
    return cudaLaunchCooperativeKernel(func, grid, block, args, shared, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *data) {
    return cudaLaunchHostFunc(s ? s : cudaStreamPerThread, fn, data);
}

EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func, void **args) {
    cudaLaunchConfig_t c_; if (c && !c->stream) { c_ = *c; c_.stream = cudaStreamPerThread; c = &c_; } return cudaLaunchKernelExC(c, func, args);
}

EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *host, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
    return cudaLaunchKernel(host, g, b, args, shared, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) {
    return cudaMallocAsync(p, n, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s) {
    return cudaMallocFromPoolAsync(p, n, pool, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t dpitch, cudaArray_const_t src, size_t x, size_t y, size_t width, size_t height, enum cudaMemcpyKind kind) {
    return cudaMemcpy2DFromArray(dst, dpitch, src, x, y, width, height, kind);
}

EXPORT cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t x, size_t y, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) {
    return cudaMemcpy2DToArray(dst, x, y, src, spitch, width, height, kind);
}

EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) {
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t s) {
    return cudaMemcpy3DAsync(p, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) {
    return cudaMemcpy3D(p);
}

EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    return cudaMemcpyAsync(dst, src, n, kind, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpyFromArray_ptds(void *dst, cudaArray_const_t src, size_t x, size_t y, size_t count, enum cudaMemcpyKind kind) {
    return cudaMemcpyFromArray(dst, src, x, y, count, kind);
}

EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) {
    return cudaMemcpyFromSymbolAsync(dst, symbol, n, offset, kind, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind) {
    return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind);
}

EXPORT cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t x, size_t y, const void *src, size_t count, enum cudaMemcpyKind kind) {
    return cudaMemcpyToArray(dst, x, y, src, count, kind);
}

EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) {
    return cudaMemcpyToSymbolAsync(symbol, src, n, offset, kind, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind) {
    return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}

EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    return cudaMemcpy(dst, src, n, kind);
}

EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
    return cudaMemset2DAsync(p, pitch, v, width, height, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int v, size_t width, size_t height) {
    return cudaMemset2D(p, pitch, v, width, height);
}

EXPORT cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s) {
    return cudaMemsetAsync(p, v, n, s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaMemset_ptds(void *p, int v, size_t n) {
    return cudaMemset(p, v, n);
}

EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned flags) {
    return cudaStreamAddCallback(s ? s : cudaStreamPerThread, cb, data, flags);
}

EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    return cudaStreamBeginCapture(s ? s : cudaStreamPerThread, mode);
}

EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *graph) {
    return cudaStreamEndCapture(s ? s : cudaStreamPerThread, graph);
}

EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id, cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *ndeps) {
    return cudaStreamGetCaptureInfo(s ? s : cudaStreamPerThread, status, id, graph, deps, edges, ndeps);
}

EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned *flags) {
    return cudaStreamGetFlags(s ? s : cudaStreamPerThread, flags);
}

EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *prio) {
    return cudaStreamGetPriority(s ? s : cudaStreamPerThread, prio);
}

EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    return cudaStreamIsCapturing(s ? s : cudaStreamPerThread, status);
}

EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
    return cudaStreamQuery(s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
    return cudaStreamSynchronize(s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    return cudaStreamWaitEvent(s ? s : cudaStreamPerThread, e, flags);
}

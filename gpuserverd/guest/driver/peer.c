/* Peer access and copies between a session's GPUs (issue 19): the worker does the copy between
 * its contexts, so the bytes never travel through the guest. */
#include "../guest.h"

static CUresult peer_access(CUcontext peer, unsigned flags, uint32_t enable) {
    if (!gc_valid_context(peer)) return CUDA_ERROR_INVALID_CONTEXT;
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    /* A context on the same device is no peer (CUDA answers so, without asking the device). */
    if (peer->device == dev) return CUDA_ERROR_INVALID_DEVICE;
    struct gw_peer_access m = {.peer = (uint32_t)peer->device, .enable = enable, .flags = flags};
    GC_ENCODE(peer_access, m, b);
    return gc_call_status(GW_TYPE_PEER_ACCESS, 0, b, b_n);
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) { return GC_T(peer_access(peer, flags, 1)); }
EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) { return GC_T(peer_access(peer, 0, 0)); }

static CUresult memcpy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s,
                            int async) {
    if (!gc_valid_context(dctx) || !gc_valid_context(sctx)) return CUDA_ERROR_INVALID_CONTEXT;
    struct gw_memcpy_peer m = {.dst = dst, .dst_device = (uint32_t)dctx->device, .src = src,
                               .src_device = (uint32_t)sctx->device, .bytes = n, .stream = gc_stream_handle(s),
                               .async = (uint32_t)async};
    GC_ENCODE(memcpy_peer, m, b);
    return gc_call_status(GW_TYPE_MEMCPY_PEER, async ? GW_FLAG_NO_REPLY : 0, b, b_n);
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
    return GC_T(memcpy_peer(dst, dctx, src, sctx, n, NULL, 0));
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                  CUstream s) {
    return GC_T(memcpy_peer(dst, dctx, src, sctx, n, s, 1));
}
ALIAS(cuMemcpyPeer_ptds, cuMemcpyPeer);
ALIAS(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync);

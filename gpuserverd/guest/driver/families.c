/* Helpers of the hand-written driver-API families. */
#include "families.h"

#include "driver/coherence.h"

#include <string.h>

CUresult gc_request_keep(uint16_t type, uint16_t flags, const uint8_t *head, size_t n, const void *tail, size_t tail_n,
                         uint16_t want, void *reply, CUresult (*keep)(void *reply, void *arg), void *arg) {
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc == CUDA_SUCCESS) rc = gc_coh_before(type);
    if (rc != CUDA_SUCCESS) return rc;
    gc_coh_prefault(tail, tail_n); /* an input kept in managed memory */
    struct gc_reply r;
    pthread_mutex_lock(&gc.mu);
    rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS) rc = gc_xfer_locked(type, flags, head, n, tail, tail_n, want, &r);
    if (rc == CUDA_SUCCESS && !(flags & GW_FLAG_NO_REPLY)) { /* sent without waiting: no reply to read */
        char err[160];
        if (gw_decode_any(want, reply, r.p, r.n, err, sizeof err) != 0) rc = gc_transport_error(err);
        else rc = (CUresult) * (const int32_t *)reply; /* every reply starts with its result */
        if (rc == CUDA_SUCCESS && keep) rc = keep(reply, arg);
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

CUresult gc_deps(const CUgraphNode *deps, size_t n, uint8_t *buf, size_t cap) {
    if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
    if (n > cap / 8) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        uint64_t id = GC_ID(deps[i]);
        if (!id) return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf + 8 * i, &id, 8); /* little-endian hosts only, as the whole guest library */
    }
    return CUDA_SUCCESS;
}

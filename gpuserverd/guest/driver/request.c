/* cuInit and the API's calls through the transport: a call on the current context's device
 * first makes that device the server's current one. */
#include "guest.h"

#include "driver/coherence.h"

#include <stdlib.h>
#include <stdio.h>

EXPORT CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    gc_connect();
    return gc.init_result;
}

/* ON_CURRENT: on the current context's device; ON_NONE: no device (global calls); else that device. */
enum { ON_CURRENT = -1, ON_NONE = -2 };

static CUresult request(int on, uint16_t type, uint16_t flags, const uint8_t *head, size_t head_n,
                        const void *tail, size_t tail_n, uint16_t want, void *reply) {
    int dev = on, on_device = on != ON_NONE;
    CUresult rc = on == ON_CURRENT ? gc_current_device(&dev) : gc_ensure_init();
    if (rc == CUDA_SUCCESS && on_device) rc = gc_coh_before(type);
    if (rc != CUDA_SUCCESS) return rc;
    gc_coh_prefault(tail, tail_n); /* an input kept in managed memory */
    struct gc_reply r;
    pthread_mutex_lock(&gc.mu);
    if (on_device) rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS) rc = gc_xfer_locked(type, flags, head, head_n, tail, tail_n, want, &r);
    if (rc == CUDA_SUCCESS && !(flags & GW_FLAG_NO_REPLY)) {
        char err[160];
        if (gw_decode_any(want, reply, r.p, r.n, err, sizeof err) != 0) rc = gc_transport_error(err);
        else rc = (CUresult) * (const int32_t *)reply; /* every reply starts with its result */
        if (rc != CUDA_SUCCESS && want == GW_TYPE_STATUS && getenv("GPUCLOUD_DEBUG")) {
            const struct gw_status *st = reply;
            fprintf(stderr, "gpucloud: %s failed (%d): %.*s\n", gw_type_name(type), rc, (int)st->message_len, st->message);
        }
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

CUresult gc_request(uint16_t type, uint16_t flags, const uint8_t *head, size_t n, uint16_t want, void *reply) {
    return request(ON_CURRENT, type, flags, head, n, NULL, 0, want, reply);
}

CUresult gc_call_status_on(int dev, uint16_t type, uint16_t flags, const uint8_t *head, size_t n) {
    struct gw_status st;
    return request(dev < 0 ? ON_CURRENT : dev, type, flags, head, n, NULL, 0, GW_TYPE_STATUS, &st);
}

CUresult gc_request_tail(uint16_t type, const uint8_t *head, size_t n, const void *tail, size_t tail_n,
                         uint16_t want, void *reply) {
    return request(ON_CURRENT, type, 0, head, n, tail, tail_n, want, reply);
}

CUresult gc_request_global(uint16_t type, const uint8_t *head, size_t n, uint16_t want, void *reply) {
    return request(ON_NONE, type, 0, head, n, NULL, 0, want, reply);
}

CUresult gc_call_status(uint16_t type, uint16_t flags, const uint8_t *head, size_t n) {
    struct gw_status st;
    return gc_request(type, flags, head, n, GW_TYPE_STATUS, &st);
}


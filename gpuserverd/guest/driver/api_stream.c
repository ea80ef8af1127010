/* Streams and events. Recording an event and making a stream wait are asynchronous. */
#include "guest.h"

#include "driver/coherence.h"

/* An event is the server's handle and, in the top byte, its device plus one (0: none known), so
 * that a call on an event of another device than the current one reaches the right context. */
#define EVENT_PTR(h, dev) ((CUevent)(uintptr_t)((h) << 8 | (uint64_t)((dev) + 1) << 56))
#define EVENT_HANDLE(e) (((uint64_t)(uintptr_t)(e) & ((1ull << 56) - 1)) >> 8)
#define EVENT_DEVICE(e) ((int)((uint64_t)(uintptr_t)(e) >> 56) - 1)

/* event_call sends a call on event e on e's device (the current one where e names none). */
static CUresult event_call(CUevent e, uint16_t type, uint16_t flags, const uint8_t *b, size_t n) {
    int dev = EVENT_DEVICE(e);
    return dev < 0 ? gc_call_status(type, flags, b, n) : gc_call_status_on(dev, type, flags, b, n);
}

/* For the generated entry points (api_gen.h). */
uint64_t gc_gen_event(void *e) { return EVENT_HANDLE(e); }

EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned flags) {
    if (!ps) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_stream_create m = {.flags = flags};
    GC_ENCODE(stream_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_STREAM_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *ps = gc_stream_ptr(h);
    if (rc == CUDA_SUCCESS) gc_coh_stream_created(*ps, flags); /* work a CPU access to mapped memory may wait for */
    return GC_T(rc);
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned flags, int priority) {
    (void)priority; /* priorities are a scheduling hint */
    return GC_T(cuStreamCreate(ps, flags));
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    if (gc_stream_handle(s) == 0 || gc_stream_is_per_thread(s)) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_stream_destroy m = {.stream = gc_stream_handle(s)};
    GC_ENCODE(stream_destroy, m, b);
    CUresult rc = gc_call_status(GW_TYPE_STREAM_DESTROY, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_stream_forget_hints(s), gc_coh_stream_destroyed(s);
    return GC_T(rc);
}
ALIAS(cuStreamDestroy, cuStreamDestroy_v2);

EXPORT CUresult cuStreamSynchronize(CUstream s) {
    struct gw_stream_synchronize m = {.stream = gc_stream_handle(s)};
    GC_ENCODE(stream_synchronize, m, b);
    return GC_T(gc_call_status(GW_TYPE_STREAM_SYNCHRONIZE, 0, b, b_n));
}

EXPORT CUresult cuStreamQuery(CUstream s) {
    struct gw_stream_query m = {.stream = gc_stream_handle(s)};
    GC_ENCODE(stream_query, m, b);
    return GC_T(gc_call_status(GW_TYPE_STREAM_QUERY, 0, b, b_n));
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    (void)flags;
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    int cur, dev = EVENT_DEVICE(e);
    CUresult rc = gc_current_device(&cur);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    if (dev >= 0 && dev != cur) { /* an event of another of the session's devices */
        struct gw_stream_wait_peer_event m = {.stream = gc_stream_handle(s), .event = EVENT_HANDLE(e),
                                              .event_device = (uint32_t)dev};
        GC_ENCODE(stream_wait_peer_event, m, b);
        return GC_T(gc_call_status(GW_TYPE_STREAM_WAIT_PEER_EVENT, GW_FLAG_NO_REPLY, b, b_n));
    }
    struct gw_stream_wait_event m = {.stream = gc_stream_handle(s), .event = EVENT_HANDLE(e)};
    GC_ENCODE(stream_wait_event, m, b);
    return GC_T(gc_call_status(GW_TYPE_STREAM_WAIT_EVENT, GW_FLAG_NO_REPLY, b, b_n));
}

EXPORT CUresult cuEventCreate(CUevent *pe, unsigned flags) {
    if (!pe) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_event_create m = {.flags = flags};
    GC_ENCODE(event_create, m, b);
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    uint64_t h;
    rc = gc_handle_call(GW_TYPE_EVENT_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *pe = EVENT_PTR(h, dev);
    return GC_T(rc);
}

EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_event_destroy m = {.event = EVENT_HANDLE(e)};
    GC_ENCODE(event_destroy, m, b);
    return GC_T(event_call(e, GW_TYPE_EVENT_DESTROY, 0, b, b_n));
}
ALIAS(cuEventDestroy, cuEventDestroy_v2);

EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_event_record m = {.event = EVENT_HANDLE(e), .stream = gc_stream_handle(s)};
    GC_ENCODE(event_record, m, b);
    return GC_T(gc_call_status(GW_TYPE_EVENT_RECORD, GW_FLAG_NO_REPLY, b, b_n));
}

EXPORT CUresult cuEventSynchronize(CUevent e) {
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_event_synchronize m = {.event = EVENT_HANDLE(e)};
    GC_ENCODE(event_synchronize, m, b);
    return GC_T(event_call(e, GW_TYPE_EVENT_SYNCHRONIZE, 0, b, b_n));
}

EXPORT CUresult cuEventQuery(CUevent e) {
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_event_query m = {.event = EVENT_HANDLE(e)};
    GC_ENCODE(event_query, m, b);
    return GC_T(event_call(e, GW_TYPE_EVENT_QUERY, 0, b, b_n));
}

EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    if (!ms) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!start || !end) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_event_elapsed_time m = {.start = EVENT_HANDLE(start), .end = EVENT_HANDLE(end)};
    GC_ENCODE(event_elapsed_time, m, b);
    struct gw_elapsed_reply er;
    CUresult rc = gc_request(GW_TYPE_EVENT_ELAPSED_TIME, 0, b, b_n, GW_TYPE_ELAPSED_REPLY, &er);
    if (rc == CUDA_SUCCESS) *ms = er.milliseconds;
    return GC_T(rc);
}
ALIAS(cuEventElapsedTime_v2, cuEventElapsedTime);

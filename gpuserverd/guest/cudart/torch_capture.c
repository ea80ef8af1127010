/* Stream-capture state queries, answered for a runtime that captures nothing: no stream is ever
 * capturing, and the thread's capture mode is kept and exchanged as NVIDIA's is. PyTorch asks
 * these before most allocations, frees and synchronisations (its caching allocator must not
 * free during a capture), so they must answer, not refuse.
 *
 * When stream capture is remoted (cudaStreamBeginCapture ... in its own file), that file answers
 * these three too and this one goes: they are strong definitions, so a link with both fails
 * loudly rather than picking one.
 *
 * Written without the CUDA headers (whose enum and graph types cudart/testshim does not declare):
 * cudaError_t and the capture enums are int-sized, the graph types pointers. */
#include <stddef.h>

#include "rt_fail.h"

#define EXPORT __attribute__((visibility("default")))

enum { SUCCESS = 0, INVALID_VALUE = 1 };
enum { CAPTURE_STATUS_NONE = 0 };                          /* cudaStreamCaptureStatusNone */
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 }; /* cudaStreamCaptureMode */


EXPORT int cudaStreamIsCapturing(void *stream, int *status) {
    (void)stream;
    if (!status) return rt_fail(INVALID_VALUE);
    *status = CAPTURE_STATUS_NONE;
    return SUCCESS;
}

/* CUDA 13's signature (the former _v3): status, capture id, graph, dependencies, their edge data
 * and count; outside a capture only the status is defined, the rest are zeroed when asked for. */
EXPORT int cudaStreamGetCaptureInfo(void *stream, int *status, unsigned long long *id, void **graph,
                                    const void **deps, const void **edges, size_t *ndeps) {
    (void)stream;
    if (!status) return rt_fail(INVALID_VALUE);
    *status = CAPTURE_STATUS_NONE;
    if (id) *id = 0;
    if (graph) *graph = NULL;
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (ndeps) *ndeps = 0;
    return SUCCESS;
}

static __thread int capture_mode = MODE_GLOBAL;

EXPORT int cudaThreadExchangeStreamCaptureMode(int *mode) {
    if (!mode || *mode < MODE_GLOBAL || *mode > MODE_RELAXED) return rt_fail(INVALID_VALUE);
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return SUCCESS;
}

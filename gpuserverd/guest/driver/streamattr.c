/* Stream attributes, kept here and answered back. The access-policy window (how much of L2 to set
 * aside for an address range) goes to the server's stream too: without it a kernel that relies on
 * persisting L2 runs much slower (NVIDIA's simpleAttributes: 10 s instead of 6 s on the H100), and
 * the context's persisting-L2 limit it works within is the server's already (cuCtxSetLimit); a
 * server that cannot apply it keeps it as a hint. The synchronization policy and the
 * memory-synchronization domain only tune performance and stay hints, validated as NVIDIA's
 * driver does. The priority is the stream's own, asked of the server; it is fixed at creation
 * (cuStreamCreateWithPriority). */
#include "families.h"

#include <stdlib.h>
#include <string.h>

struct hint {
    struct hint *next;
    CUstream stream;
    CUstreamAttrID id;
    CUstreamAttrValue value;
};

static pthread_mutex_t hints_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hint *hints;

static int hinted(CUstreamAttrID id) {
    return id == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
           id == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP || id == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
}

/* The stream must exist: the server answers a query of an unknown one with an error. */
static CUresult check_stream(CUstream s) {
    CUresult rc = cuStreamQuery(s);
    return rc == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : rc;
}

static CUresult check_value(CUstreamAttrID id, const CUstreamAttrValue *v) {
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
        const CUaccessPolicyWindow *w = &v->accessPolicyWindow;
        if (!(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f) || (unsigned)w->hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
            (unsigned)w->missProp > CU_ACCESS_PROPERTY_PERSISTING)
            return CUDA_ERROR_INVALID_VALUE;
        int dev, most = 0;
        /* NVIDIA's limit on the window, where the device reports one (attribute 109). */
        if (gc_current_device(&dev) == CUDA_SUCCESS &&
            cuDeviceGetAttribute(&most, (CUdevice_attribute)109, dev) == CUDA_SUCCESS && most > 0 &&
            w->num_bytes > (size_t)most)
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        return v->syncPolicy >= CU_SYNC_POLICY_AUTO && v->syncPolicy <= CU_SYNC_POLICY_BLOCKING_SYNC
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        return v->memSyncDomain == 0 || v->memSyncDomain == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_SUCCESS;
    }
}

/* apply_window sets the window on the server's stream; a backend without it leaves it a hint. */
static CUresult apply_window(CUstream s, const CUaccessPolicyWindow *w) {
    struct gw_stream_set_access_policy m = {.stream = gc_stream_handle(s), .base = (uint64_t)(uintptr_t)w->base_ptr,
                                            .bytes = w->num_bytes, .hit_ratio = w->hitRatio,
                                            .hit_prop = (uint32_t)w->hitProp, .miss_prop = (uint32_t)w->missProp};
    GC_ENCODE(stream_set_access_policy, m, b);
    CUresult rc = gc_call_status(GW_TYPE_STREAM_SET_ACCESS_POLICY, 0, b, b_n);
    return rc == CUDA_ERROR_NOT_SUPPORTED ? CUDA_SUCCESS : rc;
}

EXPORT CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID id, const CUstreamAttrValue *v) {
    if (!v) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY) return GC_T(CUDA_ERROR_NOT_SUPPORTED); /* fixed at creation here */
    if (!hinted(id)) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_value(id, v);
    if (rc == CUDA_SUCCESS) rc = check_stream(s);
    if (rc == CUDA_SUCCESS && id == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW) rc = apply_window(s, &v->accessPolicyWindow);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    pthread_mutex_lock(&hints_mu);
    struct hint *h = hints;
    while (h && !(h->stream == s && h->id == id)) h = h->next;
    if (!h && (h = calloc(1, sizeof *h))) {
        h->next = hints;
        h->stream = s;
        h->id = id;
        hints = h;
    }
    if (h) h->value = *v;
    pthread_mutex_unlock(&hints_mu);
    return GC_T(h ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

EXPORT CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID id, CUstreamAttrValue *v) {
    if (!v) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
        memset(v, 0, sizeof *v);
        return GC_T(cuStreamGetPriority(s, &v->priority));
    }
    if (!hinted(id)) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_stream(s);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    /* What a stream has before any set: no window, automatic policy, domain 0, the default map. */
    CUstreamAttrValue out = {0};
    if (id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY) out.syncPolicy = CU_SYNC_POLICY_AUTO;
    if (id == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP) out.memSyncDomainMap.remote = 1;
    pthread_mutex_lock(&hints_mu);
    for (struct hint *h = hints; h; h = h->next)
        if (h->stream == s && h->id == id) out = h->value;
    pthread_mutex_unlock(&hints_mu);
    *v = out;
    return GC_T(CUDA_SUCCESS);
}

/* A destroyed stream's hints go with it (a later stream may get the same handle). */
void gc_stream_forget_hints(CUstream s) {
    pthread_mutex_lock(&hints_mu);
    for (struct hint **p = &hints; *p;) {
        struct hint *h = *p;
        if (h->stream == s) {
            *p = h->next;
            free(h);
        } else {
            p = &h->next;
        }
    }
    pthread_mutex_unlock(&hints_mu);
}

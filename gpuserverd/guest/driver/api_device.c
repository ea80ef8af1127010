/* Driver version, devices and contexts. Contexts are local: the server keeps one context per
 * granted device for the whole session, and a guest context names which device it acts on. */
#include "guest.h"

#include "driver/coherence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct devinfo {
    int loaded;
    char name[257];
    CUuuid uuid;
    uint64_t total;
    int major, minor;
    char pci[65];
};
static struct devinfo devs[GC_MAX_DEVICES];
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult value_reply(uint16_t type, const uint8_t *b, size_t n, int *out) {
    struct gw_value_reply v;
    CUresult rc = gc_request_global(type, b, n, GW_TYPE_VALUE_REPLY, &v);
    if (rc == CUDA_SUCCESS) *out = v.value;
    return rc;
}

/* GC_API_VERSION is the CUDA API level this library implements: the newest entry-point forms it
 * serves through cuGetProcAddress (e.g. cuCtxGetDevice's 13.0 form). A runtime compares the
 * driver's version with its own and refuses an older driver, so the answer is the server driver's
 * version capped at what this library can honour. */
#define GC_API_VERSION 13000

EXPORT CUresult cuDriverGetVersion(int *version) {
    if (!version) return GC_T(CUDA_ERROR_INVALID_VALUE);
    /* NVIDIA's driver answers before cuInit, and runtimes ask before it: connect now. */
    gc_connect();
    if (gc_ensure_init() != CUDA_SUCCESS) {
        *version = GC_API_VERSION; /* no server: what this library offers */
        return GC_T(CUDA_SUCCESS);
    }
    struct gw_driver_version m = {0};
    GC_ENCODE(driver_version, m, b);
    int server = 0;
    CUresult rc = value_reply(GW_TYPE_DRIVER_VERSION, b, b_n, &server);
    if (rc == CUDA_SUCCESS) *version = server < GC_API_VERSION ? server : GC_API_VERSION;
    return GC_T(rc);
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    *count = gc.device_count;
    return GC_T(CUDA_SUCCESS);
}

static CUresult check_device(CUdevice d) {
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return rc;
    return d < 0 || d >= gc.device_count ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!device) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_device(ordinal);
    if (rc == CUDA_SUCCESS) *device = ordinal;
    return GC_T(rc);
}

static CUresult info(CUdevice d, struct devinfo **out) {
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&dev_mu);
    struct devinfo *di = &devs[d];
    if (!di->loaded) {
        struct gw_device_info m = {.ordinal = (uint32_t)d};
        uint8_t b[8];
        size_t n = gw_device_info_size(&m);
        gw_device_info_encode(&m, b);
        struct gc_reply r;
        pthread_mutex_lock(&gc.mu);
        rc = gc_xfer_locked(GW_TYPE_DEVICE_INFO, 0, b, n, NULL, 0, GW_TYPE_DEVICE_INFO_REPLY, &r);
        struct gw_device_info_reply dr;
        char err[128];
        if (rc == CUDA_SUCCESS && gw_device_info_reply_decode(&dr, r.p, r.n, err, sizeof err) != 0)
            rc = gc_transport_error(err);
        if (rc == CUDA_SUCCESS && dr.result != 0) rc = (CUresult)dr.result;
        if (rc == CUDA_SUCCESS) {
            snprintf(di->name, sizeof di->name, "%.*s", (int)dr.name_len, dr.name);
            memcpy(di->uuid.bytes, dr.uuid, dr.uuid_len == 16 ? 16 : 0);
            snprintf(di->pci, sizeof di->pci, "%.*s", (int)dr.pci_bus_id_len, dr.pci_bus_id);
            di->total = dr.total_memory;
            di->major = dr.major;
            di->minor = dr.minor;
            di->loaded = 1;
        }
        pthread_mutex_unlock(&gc.mu);
    }
    pthread_mutex_unlock(&dev_mu);
    *out = di;
    return rc;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    struct devinfo *di;
    if (!name || len <= 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = info(d, &di);
    if (rc == CUDA_SUCCESS) snprintf(name, len, "%s", di->name);
    return GC_T(rc);
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice d) {
    struct devinfo *di;
    if (!uuid) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = info(d, &di);
    if (rc == CUDA_SUCCESS) *uuid = di->uuid;
    return GC_T(rc);
}
ALIAS(cuDeviceGetUuid, cuDeviceGetUuid_v2);

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    struct devinfo *di;
    if (!bytes) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = info(d, &di);
    if (rc == CUDA_SUCCESS) *bytes = di->total;
    return GC_T(rc);
}
ALIAS(cuDeviceTotalMem, cuDeviceTotalMem_v2);

EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
    struct devinfo *di;
    if (!major || !minor) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = info(d, &di);
    if (rc == CUDA_SUCCESS) {
        *major = di->major;
        *minor = di->minor;
    }
    return GC_T(rc);
}

EXPORT CUresult cuDeviceGetPCIBusId(char *pci, int len, CUdevice d) {
    struct devinfo *di;
    if (!pci || len <= 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = info(d, &di);
    if (rc == CUDA_SUCCESS) snprintf(pci, len, "%s", di->pci);
    return GC_T(rc);
}

/* Without a shared arena the program and the device share no memory: managed and mapped host
 * memory are kept coherent by software (coherence.c), which gives CUDA's semantics for devices
 * without concurrent managed access; so the device says so, and programs take that path (CPU
 * access after synchronizing, no system-wide atomics while a kernel runs). Over an arena whose
 * managed memory is coherent too (managed.c: a GPU whose atomics on host memory are not the
 * CPU's) the device says it has no concurrent managed access either. */
enum { /* CUdevice_attribute's numbers (the guest's cuda.h does not name them) */
    ATTR_HOST_NATIVE_ATOMIC_SUPPORTED = 86, ATTR_PAGEABLE_MEMORY_ACCESS = 88, ATTR_CONCURRENT_MANAGED_ACCESS = 89,
    ATTR_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91, ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES = 100,
    ATTR_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST = 101, ATTR_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED = 147,
};

static int coherence_attribute(int d, int a, int v) {
    switch (a) {
    case ATTR_HOST_NATIVE_ATOMIC_SUPPORTED:
    case ATTR_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case ATTR_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: return gc_coh_transport() ? 0 : v;
    case ATTR_PAGEABLE_MEMORY_ACCESS:
    case ATTR_CONCURRENT_MANAGED_ACCESS:
    case ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case ATTR_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return gc_coh_transport() || gc_managed_coherent(d) ? 0 : v;
    default: return v;
    }
}

/* gc_host_native_atomics: whether device d's atomics on host memory are atomic with the CPU's
 * (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, as the server's device has it). */
int gc_host_native_atomics(int d) {
    int v = 0;
    struct gw_device_attribute m = {.ordinal = (uint32_t)d, .attribute = ATTR_HOST_NATIVE_ATOMIC_SUPPORTED};
    GC_ENCODE(device_attribute, m, b);
    return value_reply(GW_TYPE_DEVICE_ATTRIBUTE, b, b_n, &v) == CUDA_SUCCESS && v == 1;
}

/* Attributes do not change; frameworks ask for them often, so they are cached. */
#define MAX_ATTR 160
static int attr_val[GC_MAX_DEVICES][MAX_ATTR];
static unsigned char attr_ok[GC_MAX_DEVICES][MAX_ATTR];

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attr, CUdevice d) {
    if (!pi) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    int a = (int)attr;
    if (a > 0 && a < MAX_ATTR && __atomic_load_n(&attr_ok[d][a], __ATOMIC_ACQUIRE)) {
        *pi = attr_val[d][a];
        return GC_T(CUDA_SUCCESS);
    }
    struct gw_device_attribute m = {.ordinal = (uint32_t)d, .attribute = a};
    GC_ENCODE(device_attribute, m, b);
    rc = value_reply(GW_TYPE_DEVICE_ATTRIBUTE, b, b_n, pi);
    if (rc == CUDA_SUCCESS) *pi = coherence_attribute(d, a, *pi);
    if (rc == CUDA_SUCCESS && a > 0 && a < MAX_ATTR) {
        attr_val[d][a] = *pi;
        __atomic_store_n(&attr_ok[d][a], 1, __ATOMIC_RELEASE);
    }
    return GC_T(rc);
}

/* ---- contexts ---- */

#define CTX_STACK 32
static __thread struct CUctx_st *stack[CTX_STACK];
static __thread int depth;
static struct CUctx_st primary[GC_MAX_DEVICES];
static int primary_refs[GC_MAX_DEVICES];
static unsigned primary_flags[GC_MAX_DEVICES];

static int valid_ctx(struct CUctx_st *c) { return c && c->magic == GC_CTX_MAGIC; }
int gc_valid_context(CUcontext c) { return valid_ctx(c); }

CUresult gc_current_device(int *dev) {
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return rc;
    if (depth == 0 || !valid_ctx(stack[depth - 1])) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = stack[depth - 1]->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
    if (!pctx) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    pthread_mutex_lock(&dev_mu);
    primary[d].magic = GC_CTX_MAGIC;
    primary[d].device = d;
    primary[d].primary = 1;
    primary_refs[d]++;
    pthread_mutex_unlock(&dev_mu);
    *pctx = &primary[d];
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    pthread_mutex_lock(&dev_mu);
    rc = primary_refs[d] > 0 ? (primary_refs[d]--, CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&dev_mu);
    return GC_T(rc);
}
ALIAS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    pthread_mutex_lock(&dev_mu);
    primary_refs[d] = 0;
    pthread_mutex_unlock(&dev_mu);
    gc_cls_context_gone(&primary[d]);
    return GC_T(CUDA_SUCCESS);
}
ALIAS(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2);

EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags) {
    CUresult rc = check_device(d);
    if (rc == CUDA_SUCCESS) primary_flags[d] = flags;
    return GC_T(rc);
}
ALIAS(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2);

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
    if (!flags || !active) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    pthread_mutex_lock(&dev_mu);
    *flags = primary_flags[d];
    *active = primary_refs[d] > 0;
    pthread_mutex_unlock(&dev_mu);
    return GC_T(CUDA_SUCCESS);
}

static CUresult push(struct CUctx_st *c) {
    if (depth == CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice d) {
    (void)flags;
    if (!pctx) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = check_device(d);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    c->magic = GC_CTX_MAGIC;
    c->device = d;
    rc = push(c);
    if (rc != CUDA_SUCCESS) {
        free(c);
        return GC_T(rc);
    }
    *pctx = c;
    return GC_T(CUDA_SUCCESS);
}
ALIAS(cuCtxCreate, cuCtxCreate_v2);

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned flags, CUdevice d) {
    (void)params;
    (void)n;
    return GC_T(cuCtxCreate_v2(pctx, flags, d));
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned flags, CUdevice d) {
    (void)params;
    return GC_T(cuCtxCreate_v2(pctx, flags, d));
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (!valid_ctx(ctx) || ctx->primary) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    for (int i = 0; i < depth; i++) /* drop it from this thread's stack */
        if (stack[i] == ctx) {
            memmove(&stack[i], &stack[i + 1], (depth - i - 1) * sizeof stack[0]);
            depth--;
            i--;
        }
    gc_cls_context_gone(ctx);
    ctx->magic = 0;
    free(ctx);
    return GC_T(CUDA_SUCCESS);
}
ALIAS(cuCtxDestroy, cuCtxDestroy_v2);

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (!valid_ctx(ctx)) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    return GC_T(push(ctx));
}
ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2);

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (depth == 0) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    CUcontext c = stack[--depth];
    if (pctx) *pctx = c;
    return GC_T(CUDA_SUCCESS);
}
ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2);

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (ctx == NULL) {
        if (depth > 0) depth--;
        return GC_T(CUDA_SUCCESS);
    }
    if (!valid_ctx(ctx)) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    if (depth == 0) return GC_T(push(ctx));
    stack[depth - 1] = ctx;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) {
    if (!pctx) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = gc_ensure_init();
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    *pctx = depth ? stack[depth - 1] : NULL;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device) {
    if (!device) return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(gc_current_device(device));
}

/* cuCtxGetDevice_v2 (CUDA 13.0): the device of ctx, or of the current context when ctx is NULL. */
EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    if (!device) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!ctx) return GC_T(gc_current_device(device));
    if (!valid_ctx(ctx)) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    *device = ctx->device;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned *version) {
    if (!version) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (ctx && !valid_ctx(ctx)) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    *version = 3020;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSynchronize(void) {
    struct gw_synchronize m = {0};
    GC_ENCODE(synchronize, m, b);
    return GC_T(gc_call_status(GW_TYPE_SYNCHRONIZE, 0, b, b_n));
}

/* cuCtxSynchronize_v2 (CUDA 13.0): waits for ctx's work (the current context's when NULL) without
 * changing which context is current. */
EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    if (!ctx) return GC_T(cuCtxSynchronize());
    if (!valid_ctx(ctx)) return GC_T(CUDA_ERROR_INVALID_CONTEXT);
    CUresult rc = push(ctx);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    rc = cuCtxSynchronize();
    depth--;
    return GC_T(rc);
}

/* ---- the current context's limits and cache preference, kept by the server's context ---- */

EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    struct gw_ctx_set_limit m = {.limit = (int32_t)limit, .value = value};
    GC_ENCODE(ctx_set_limit, m, b);
    return GC_T(gc_call_status(GW_TYPE_CTX_SET_LIMIT, 0, b, b_n));
}

EXPORT CUresult cuCtxGetLimit(size_t *v, CUlimit limit) {
    if (!v) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_ctx_get_limit m = {.limit = (int32_t)limit};
    GC_ENCODE(ctx_get_limit, m, b);
    struct gw_limit_reply r;
    CUresult rc = gc_request(GW_TYPE_CTX_GET_LIMIT, 0, b, b_n, GW_TYPE_LIMIT_REPLY, &r);
    if (rc == CUDA_SUCCESS) *v = r.value;
    return GC_T(rc);
}

EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
    struct gw_ctx_set_cache_config m = {.config = (int32_t)config};
    GC_ENCODE(ctx_set_cache_config, m, b);
    return GC_T(gc_call_status(GW_TYPE_CTX_SET_CACHE_CONFIG, 0, b, b_n));
}

EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *config) {
    if (!config) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_ctx_get_cache_config m = {0};
    GC_ENCODE(ctx_get_cache_config, m, b);
    struct gw_value_reply r;
    CUresult rc = gc_request(GW_TYPE_CTX_GET_CACHE_CONFIG, 0, b, b_n, GW_TYPE_VALUE_REPLY, &r);
    if (rc == CUDA_SUCCESS) *config = (CUfunc_cache)r.value;
    return GC_T(rc);
}

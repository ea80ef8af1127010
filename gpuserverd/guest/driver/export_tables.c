/* cuGetExportTable: the private tables NVIDIA's runtime (libcudart, shared or static) fetches from
 * the driver by UUID. Each table is an array of pointers; most start with their own size in bytes.
 * What the known entries do was learnt from public reverse-engineering notes (ZLUDA's dark API
 * list, Wine's nvcuda); each is implemented here on top of this library's own driver API. Entries
 * whose meaning is not known answer CUDA_ERROR_NOT_SUPPORTED and say which table and slot were
 * called; unknown tables are refused with CUDA_ERROR_NOT_FOUND (logged with GPUCLOUD_TRACE=1 or
 * GPUCLOUD_DEBUG=1). The tables NVIDIA's runtime uses to establish that the driver is NVIDIA's own
 * (an integrity digest keyed with a secret, and "context checks") are deliberately not imitated. */
#include "guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* unknown_entry reports a call to a slot whose meaning we do not know, with the first six
 * integer-register arguments (what a trace needs to learn the slot; registers the caller did not
 * set hold junk, which is harmless to read). Stubs may be called with any arguments: under the
 * System V ABI the caller cleans up, so ignoring them is safe. */
static CUresult unknown_entry(const char *table, int slot, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d,
                              uintptr_t e, uintptr_t f) {
    fprintf(stderr, "gpucloud: %s[%d] (a private runtime entry) is not supported\n", table, slot);
    gc_trace("%s[%d](%#lx, %#lx, %#lx, %#lx, %#lx, %#lx) -> %d", table, slot, (unsigned long)a, (unsigned long)b,
             (unsigned long)c, (unsigned long)d, (unsigned long)e, (unsigned long)f, CUDA_ERROR_NOT_SUPPORTED);
    return CUDA_ERROR_NOT_SUPPORTED;
}
#define STUB(T, I)                                                                                       \
    static CUresult T##_##I(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) { \
        return unknown_entry(#T, I, a, b, c, d, e, f);                                                   \
    }

/* ---- CUDART_INTERFACE: module loading from nvcc's fat binaries, primary contexts ---- */

#define FATBINC_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u

/* fatbin_from_wrapper returns the fat binary a __fatBinC_Wrapper_t ({magic, version, data,
 * filename_or_fatbins}) points at, or NULL if w is not one. */
static const void *fatbin_from_wrapper(const void *w) {
    uint32_t magic, version;
    memcpy(&magic, w, 4);
    memcpy(&version, (const uint8_t *)w + 4, 4);
    if (magic != FATBINC_MAGIC || (version != 1 && version != 2)) return NULL;
    const void *data;
    memcpy(&data, (const uint8_t *)w + 8, sizeof data);
    return data;
}

static CUresult load_fatbin(CUmodule *mod, const void *fatbin, const char *who) {
    if (!mod || !fatbin) return CUDA_ERROR_INVALID_VALUE;
    uint32_t magic;
    memcpy(&magic, fatbin, 4);
    if (magic != FATBIN_MAGIC) {
        gc_trace("%s: image is not a fat binary (magic %#x)", who, magic);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    CUresult rc = cuModuleLoadData(mod, fatbin);
    gc_trace("%s -> %d module %p", who, rc, rc == CUDA_SUCCESS ? (void *)*mod : NULL);
    return rc;
}

/* [1]: load the module of a fat-binary wrapper. */
static CUresult rt_module_from_wrapper(CUmodule *mod, const void *wrapper) {
    const void *fb = wrapper ? fatbin_from_wrapper(wrapper) : NULL;
    if (!fb) return CUDA_ERROR_INVALID_VALUE;
    return load_fatbin(mod, fb, "CUDART_INTERFACE[1] module from wrapper");
}

/* [2]: the device's primary context, without taking a reference. */
static CUresult rt_primary_context(CUcontext *pctx, CUdevice dev) {
    CUresult rc = cuDevicePrimaryCtxRetain(pctx, dev);
    if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRelease_v2(dev);
    gc_trace("CUDART_INTERFACE[2] primary context of device %d -> %d", dev, rc);
    return rc;
}

/* [6]: as [1], with host-variable registrations (a and b, n of them) we cannot serve. */
static CUresult rt_module_from_wrapper_ext(CUmodule *mod, const void *wrapper, void *a, void *b, unsigned n) {
    if (a || b || n) {
        fprintf(stderr, "gpucloud: CUDART_INTERFACE[6] with %u host-variable registrations is not supported\n", n);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return rt_module_from_wrapper(mod, wrapper);
}

/* [7]: observed to take one word and succeed without effect (it tunes driver-side behaviour
 * that has no counterpart here); we log it so a trace shows the value. */
static CUresult rt_entry7(uintptr_t arg) {
    gc_trace("CUDART_INTERFACE[7](%#lx): no effect here", (unsigned long)arg);
    return CUDA_SUCCESS;
}

/* [8]: as [6], given the fat binary itself rather than its wrapper. */
static CUresult rt_module_from_fatbin_ext(const void *fatbin, CUmodule *mod, void *a, void *b, unsigned n) {
    if (a || b || n) {
        fprintf(stderr, "gpucloud: CUDART_INTERFACE[8] with %u host-variable registrations is not supported\n", n);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return load_fatbin(mod, fatbin, "CUDART_INTERFACE[8] module from fat binary");
}

STUB(CUDART_INTERFACE, 3) STUB(CUDART_INTERFACE, 4) STUB(CUDART_INTERFACE, 5) STUB(CUDART_INTERFACE, 9)
STUB(CUDART_INTERFACE, 10) STUB(CUDART_INTERFACE, 11) STUB(CUDART_INTERFACE, 12)

/* CUDA 13's driver serves 13 slots here; slots we do not know fail when called, naming themselves. */
static const void *cudart_interface[13] = {
    (void *)(13 * sizeof(void *)), (void *)rt_module_from_wrapper, (void *)rt_primary_context,
    (void *)CUDART_INTERFACE_3, (void *)CUDART_INTERFACE_4, (void *)CUDART_INTERFACE_5,
    (void *)rt_module_from_wrapper_ext, (void *)rt_entry7, (void *)rt_module_from_fatbin_ext,
    (void *)CUDART_INTERFACE_9, (void *)CUDART_INTERFACE_10, (void *)CUDART_INTERFACE_11,
    (void *)CUDART_INTERFACE_12,
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS: buffers the runtime keeps tool-callback state in ---- */

/* The runtime sizes its callback state by these answers and refuses a driver whose buffers are
 * smaller than it needs (cudaErrorInsufficientDriver): the counts are NVIDIA's driver's (CUDA 13,
 * gputests/exportprobe: 1024 and 14), the buffers sized as if each counted word is 8 bytes. */
#define HOOKS_SLOTS2 1024
#define HOOKS_SLOTS6 14
static uintptr_t hooks_space2[HOOKS_SLOTS2];
static uintptr_t hooks_space6[HOOKS_SLOTS6];

static void hooks_buffer2(void **p, size_t *n) {
    *p = hooks_space2;
    *n = HOOKS_SLOTS2;
    gc_trace("TOOLS_RUNTIME_CALLBACK_HOOKS[2] -> buffer of %zu", *n);
}
static void hooks_buffer6(void **p, size_t *n) {
    *p = hooks_space6;
    *n = HOOKS_SLOTS6;
    gc_trace("TOOLS_RUNTIME_CALLBACK_HOOKS[6] -> buffer of %zu", *n);
}
STUB(TOOLS_RUNTIME_CALLBACK_HOOKS, 1) STUB(TOOLS_RUNTIME_CALLBACK_HOOKS, 3)
STUB(TOOLS_RUNTIME_CALLBACK_HOOKS, 4) STUB(TOOLS_RUNTIME_CALLBACK_HOOKS, 5)

static const void *tools_hooks[7] = {
    (void *)(7 * sizeof(void *)), (void *)TOOLS_RUNTIME_CALLBACK_HOOKS_1, (void *)hooks_buffer2,
    (void *)TOOLS_RUNTIME_CALLBACK_HOOKS_3, (void *)TOOLS_RUNTIME_CALLBACK_HOOKS_4,
    (void *)TOOLS_RUNTIME_CALLBACK_HOOKS_5, (void *)hooks_buffer6,
};

/* ---- TOOLS_TLS: only its size is known to be read ---- */

STUB(TOOLS_TLS, 1) STUB(TOOLS_TLS, 2)
/* Three words, as NVIDIA's driver serves it (gputests/exportprobe). */
static const void *tools_tls[3] = {(void *)(3 * sizeof(void *)), (void *)TOOLS_TLS_1, (void *)TOOLS_TLS_2};

/* ---- CONTEXT_LOCAL_STORAGE: the runtime's per-context state, keyed by (context, key) ---- */

typedef void (*cls_dtor)(CUcontext, void *key, void *value);
struct cls_entry {
    CUcontext ctx;
    void *key, *value;
    cls_dtor dtor;
    struct cls_entry *next;
};
static struct cls_entry *cls_head;
static pthread_mutex_t cls_mu = PTHREAD_MUTEX_INITIALIZER;

/* cls_ctx resolves NULL to the calling thread's current context. */
static CUresult cls_ctx(CUcontext *ctx) {
    if (*ctx) return CUDA_SUCCESS;
    CUresult rc = cuCtxGetCurrent(ctx);
    if (rc == CUDA_SUCCESS && !*ctx) rc = CUDA_ERROR_INVALID_CONTEXT;
    return rc;
}

static struct cls_entry **cls_find_locked(CUcontext ctx, void *key) {
    struct cls_entry **e = &cls_head;
    while (*e && !((*e)->ctx == ctx && (*e)->key == key)) e = &(*e)->next;
    return e;
}

/* [0]: store value under (ctx, key); dtor runs when the context goes. */
static CUresult cls_set(CUcontext ctx, void *key, void *value, cls_dtor dtor) {
    CUresult rc = cls_ctx(&ctx);
    gc_trace("CONTEXT_LOCAL_STORAGE set ctx %p key %p -> %d", (void *)ctx, key, rc);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&cls_mu);
    struct cls_entry **e = cls_find_locked(ctx, key);
    if (!*e) {
        *e = calloc(1, sizeof **e);
        if (!*e) {
            pthread_mutex_unlock(&cls_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        (*e)->ctx = ctx;
        (*e)->key = key;
    }
    (*e)->value = value;
    (*e)->dtor = dtor;
    pthread_mutex_unlock(&cls_mu);
    return CUDA_SUCCESS;
}

/* [1]: forget (ctx, key) without running its destructor. */
static CUresult cls_remove(CUcontext ctx, void *key) {
    CUresult rc = cls_ctx(&ctx);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&cls_mu);
    struct cls_entry **e = cls_find_locked(ctx, key);
    struct cls_entry *gone = *e;
    if (gone) *e = gone->next;
    pthread_mutex_unlock(&cls_mu);
    free(gone);
    return gone ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* [2]: the value stored under (ctx, key); CUDA_ERROR_INVALID_VALUE when none is. */
static CUresult cls_get(void **value, CUcontext ctx, void *key) {
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cls_ctx(&ctx);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&cls_mu);
    struct cls_entry *e = *cls_find_locked(ctx, key);
    if (e) *value = e->value;
    pthread_mutex_unlock(&cls_mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* gc_cls_context_gone runs and drops the destructors stored for ctx (context destroyed or
 * primary context reset). */
void gc_cls_context_gone(CUcontext ctx) {
    for (;;) {
        pthread_mutex_lock(&cls_mu);
        struct cls_entry **e = &cls_head;
        while (*e && (*e)->ctx != ctx) e = &(*e)->next;
        struct cls_entry *gone = *e;
        if (gone) *e = gone->next;
        pthread_mutex_unlock(&cls_mu);
        if (!gone) return;
        if (gone->dtor) gone->dtor(ctx, gone->key, gone->value); /* outside the lock: it may call back */
        free(gone);
    }
}

STUB(CONTEXT_LOCAL_STORAGE, 3)
static const void *context_local_storage[4] = {(void *)cls_set, (void *)cls_remove, (void *)cls_get,
                                               (void *)CONTEXT_LOCAL_STORAGE_3};

/* ---- CTX_CREATE_BYPASS: cuCtxCreate by another door ---- */

static const void *ctx_create_bypass[2] = {(void *)(2 * sizeof(void *)), (void *)cuCtxCreate_v2};

/* ---- CONTEXT_CHECKS (263e8860-...): per-context conditions the runtime asks about ----
 * The runtime asks, for a context, for a word of condition flags and a pointer. NVIDIA's driver
 * answers 0 and leaves the pointer alone for an ordinary context (observed natively with
 * gputests/exportprobe on the H100, and consistent with public notes); none of the conditions can
 * hold for a context of this library, so that is the answer here too. */
static CUresult ctx_conditions(CUcontext ctx, uint32_t *flags, const void **detail) {
    (void)detail;
    if (ctx && !gc_valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (flags) *flags = 0;
    gc_trace("CONTEXT_CHECKS[2] ctx %p -> flags 0", (void *)ctx);
    return CUDA_SUCCESS;
}

/* [3]: takes nothing and answers 0 on NVIDIA's driver (observed as above). */
static uint32_t ctx_conditions_global(void) {
    gc_trace("CONTEXT_CHECKS[3] -> 0");
    return 0;
}

STUB(CONTEXT_CHECKS, 1) STUB(CONTEXT_CHECKS, 4) STUB(CONTEXT_CHECKS, 5) STUB(CONTEXT_CHECKS, 6)
STUB(CONTEXT_CHECKS, 7) STUB(CONTEXT_CHECKS, 8) STUB(CONTEXT_CHECKS, 9) STUB(CONTEXT_CHECKS, 10)
STUB(CONTEXT_CHECKS, 11) STUB(CONTEXT_CHECKS, 12) STUB(CONTEXT_CHECKS, 13) STUB(CONTEXT_CHECKS, 14)
/* NVIDIA's driver serves 15 words here (gputests/exportprobe); the slots we do not know fail
 * when called, naming themselves. */
static const void *context_checks[15] = {
    (void *)(15 * sizeof(void *)), (void *)CONTEXT_CHECKS_1, (void *)ctx_conditions, (void *)ctx_conditions_global,
    (void *)CONTEXT_CHECKS_4, (void *)CONTEXT_CHECKS_5, (void *)CONTEXT_CHECKS_6, (void *)CONTEXT_CHECKS_7,
    (void *)CONTEXT_CHECKS_8, (void *)CONTEXT_CHECKS_9, (void *)CONTEXT_CHECKS_10, (void *)CONTEXT_CHECKS_11,
    (void *)CONTEXT_CHECKS_12, (void *)CONTEXT_CHECKS_13, (void *)CONTEXT_CHECKS_14,
};

/* ---- tables served only for diagnosis (GPUCLOUD_PROBE_TABLES) ----
 * Their meaning is not public. With GPUCLOUD_PROBE_TABLES naming them (comma-separated id
 * prefixes, e.g. f8cff951,d4082055) they are served with the size NVIDIA's driver gives them and
 * slots that log their arguments and fail, so a trace shows whether and how a runtime uses them. */
STUB(F8CFF951, 1) STUB(F8CFF951, 2)
static const void *probe_f8cff951[3] = {(void *)(3 * sizeof(void *)), (void *)F8CFF951_1, (void *)F8CFF951_2};
STUB(D4082055, 1) STUB(D4082055, 2)
static const void *probe_d4082055[3] = {(void *)(3 * sizeof(void *)), (void *)D4082055_1, (void *)D4082055_2};

static int probe_enabled(const char *uuid) {
    const char *v = getenv("GPUCLOUD_PROBE_TABLES");
    if (!v) return 0;
    char list[256];
    snprintf(list, sizeof list, "%s", v);
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (*p && !strncmp(uuid, p, strlen(p))) return 1;
    return 0;
}

/* ---- dispatch ---- */

static const struct {
    const char *name;
    unsigned char id[16];
    const void *const *table;
    int probe; /* served only when GPUCLOUD_PROBE_TABLES names it */
} tables[] = {
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, cudart_interface, 0},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS", {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, tools_hooks, 0},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, tools_tls, 0},
    {"CONTEXT_LOCAL_STORAGE", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, context_local_storage, 0},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, context_checks, 0},
    {"CTX_CREATE_BYPASS", {0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86}, ctx_create_bypass, 0},
    {"F8CFF951 (probe)", {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9}, probe_f8cff951, 1},
    {"D4082055 (probe)", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, probe_d4082055, 1},
    {"GPUCLOUD_PRIVATE", GC_PRIVATE_TABLE_ID, (const void *const *)&gc_private_table, 0},
};

EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
    char u[37];
    gc_format_uuid((const unsigned char *)id->bytes, u);
    int authentication = 0; /* NVIDIA's driver-authentication table, not served */
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        if (memcmp(tables[i].id, id->bytes, 16) != 0) continue;
        if (tables[i].probe && !probe_enabled(u)) {
            authentication = tables[i].table == probe_d4082055;
            break;
        }
        *table = tables[i].table;
        gc_trace("cuGetExportTable %s (%s) -> 0", u, tables[i].name);
        return CUDA_SUCCESS;
    }
    /* An id we do not know is answered as a driver without that table would: not found. (NVIDIA's
     * runtime reads any other answer for some ids, e.g. f8cff951-..., as an old driver.) */
    *table = NULL;
    gc_trace("cuGetExportTable %s (unknown) -> %d", u, CUDA_ERROR_NOT_FOUND);
    if (authentication) {
        /* Only NVIDIA's runtime asks for this one, and it stops without it with an error that
         * points nowhere ("named symbol not found"): say what is going on, once. */
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpucloud: this program uses NVIDIA's CUDA runtime (linked in statically, or "
                            "NVIDIA's libcudart/libcublas found first), which authenticates NVIDIA's driver and "
                            "does not run on gpucloud's; build it with nvcc -cudart shared so it loads "
                            "gpucloud's libcudart.so.13 (in /usr/lib/gpucloud on gpucloud images)\n");
    } else if (getenv("GPUCLOUD_DEBUG")) {
        fprintf(stderr, "gpucloud: export table %s is not provided\n", u);
    }
    return CUDA_ERROR_NOT_FOUND;
}

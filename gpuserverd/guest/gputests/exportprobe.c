/* exportprobe: what NVIDIA's own driver answers for the private tables (cuGetExportTable) its
 * runtime asks for, so the guest library's answers can follow observed behaviour rather than
 * guesses. Run natively only (scripts/gpu-run.sh with RT=1). It prints, per table id, whether the
 * driver serves it and the table's first word (its size in bytes, for most tables), and calls the
 * two context-check entries the guest library implements, printing what they return.
 * Exit: 0 when every probe ran, 2 on a CUDA error before the probes. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned char id[16];
} ids[] = {
    {"f8cff951 (unnamed)", {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9}},
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS", {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}},
    {"CONTEXT_LOCAL_STORAGE", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}},
    {"d4082055 (integrity digest)", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}},
    {"CTX_CREATE_BYPASS", {0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86}},
};

#define CHECK(x)                                                             \
    do {                                                                     \
        CUresult rc_ = (x);                                                  \
        if (rc_ != CUDA_SUCCESS) {                                           \
            fprintf(stderr, "%s:%d: %s: error %d\n", __FILE__, __LINE__, #x, rc_); \
            return 2;                                                        \
        }                                                                    \
    } while (0)

int main(void) {
    int version = 0;
    CHECK(cuDriverGetVersion(&version));
    printf("PROBE driver_version %d\n", version);
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    const void *checks = NULL, *hooks = NULL;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        CUuuid u;
        memcpy(u.bytes, ids[i].id, 16);
        const void *t = NULL;
        CUresult rc = cuGetExportTable(&t, &u);
        printf("PROBE table %-30s rc %d first_word %#lx\n", ids[i].name, rc,
               rc == CUDA_SUCCESS && t ? (unsigned long)*(const uintptr_t *)t : 0ul);
        if (rc == CUDA_SUCCESS && !strcmp(ids[i].name, "CONTEXT_CHECKS")) checks = t;
        if (rc == CUDA_SUCCESS && !strcmp(ids[i].name, "TOOLS_RUNTIME_CALLBACK_HOOKS")) hooks = t;
    }
    if (checks) {
        typedef CUresult (*conditions_fn)(CUcontext, uint32_t *, const void **);
        typedef uint32_t (*global_fn)(void);
        const void *const *slots = checks;
        uint32_t flags = 0xdeadbeef;
        const void *detail = (const void *)0x1234;
        CUresult rc = ((conditions_fn)slots[2])(ctx, &flags, &detail);
        printf("PROBE CONTEXT_CHECKS[2](primary ctx) rc %d flags %#x detail %p\n", rc, flags, detail);
        flags = 0xdeadbeef;
        detail = (const void *)0x1234;
        rc = ((conditions_fn)slots[2])(NULL, &flags, &detail);
        printf("PROBE CONTEXT_CHECKS[2](NULL) rc %d flags %#x detail %p\n", rc, flags, detail);
        printf("PROBE CONTEXT_CHECKS[3]() = %u\n", ((global_fn)slots[3])());
    }
    if (hooks) { /* slots 2 and 6 hand out a buffer and its size */
        typedef void (*buffer_fn)(void **, size_t *);
        const void *const *slots = hooks;
        for (int slot = 2; slot <= 6; slot += 4) {
            void *p = NULL;
            size_t n = 0;
            ((buffer_fn)slots[slot])(&p, &n);
            printf("PROBE TOOLS_RUNTIME_CALLBACK_HOOKS[%d] buffer %s size %zu\n", slot, p ? "set" : "NULL", n);
        }
    }
    { /* the runtime's first lookup is of the empty name */
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CUresult rc = cuGetProcAddress("", &fn, 0, 0, &st);
        printf("PROBE cuGetProcAddress(\"\", 0) rc %d fn %p status %d\n", rc, fn, (int)st);
    }
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}

/* cuGetExportTable through a running gpuserverd (simulated backend): each table NVIDIA's runtime
 * fetches is served with entries that do what the runtime expects of them (module loading from
 * nvcc's fat binaries, the primary context, context-local storage with its destructors, context
 * creation), unknown slots fail with CUDA_ERROR_NOT_SUPPORTED, unknown ids are not found. Then
 * cuGetProcAddress's flags, and the generated stubs of functions gpucloud refuses. */
#define _GNU_SOURCE
#include "check.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

static const CUuuid cudart_interface = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}};
static const CUuuid hooks = {{(char)0xa0, (char)0x94, 0x79, (char)0x8c, 0x2e, 0x74, 0x2e, 0x74, (char)0x93, (char)0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}};
static const CUuuid cls = {{(char)0xc6, (char)0x93, 0x33, 0x6e, 0x11, 0x21, (char)0xdf, 0x11, (char)0xa8, (char)0xc3, 0x68, (char)0xf3, 0x55, (char)0xd8, (char)0x95, (char)0x93}};
static const CUuuid bypass = {{0x0c, (char)0xa5, 0x0b, (char)0x8c, 0x10, 0x04, (char)0x92, (char)0x9a, (char)0x89, (char)0xa7, (char)0xd0, (char)0xdf, 0x10, (char)0xe7, 0x72, (char)0x86}};
static const CUuuid tools_tls = {{0x42, (char)0xd8, 0x5a, (char)0x81, 0x23, (char)0xf6, (char)0xcb, 0x47, (char)0x82, (char)0x98, (char)0xf6, (char)0xe7, (char)0x8a, 0x3a, (char)0xec, (char)0xdc}};
static const CUuuid checks = {{0x26, 0x3e, (char)0x88, 0x60, 0x7c, (char)0xd2, 0x61, 0x43, (char)0x92, (char)0xf6, (char)0xbb, (char)0xd5, 0x00, 0x6d, (char)0xfa, 0x7e}};
static const CUuuid f8cf = {{(char)0xf8, (char)0xcf, (char)0xf9, 0x51, 0x21, 0x46, (char)0x8b, 0x4e, (char)0xb9, (char)0xe2, (char)0xfb, 0x46, (char)0x9e, 0x7c, 0x0d, (char)0xd9}};
static const CUuuid integrity = {{(char)0xd4, 0x08, 0x20, 0x55, (char)0xbd, (char)0xe6, 0x70, 0x4b, (char)0x8d, 0x34, (char)0xba, 0x12, 0x3c, 0x66, (char)0xe1, (char)0xf2}};


static int dtor_calls;
static void *dtor_value;
static void on_destroy(CUcontext ctx, void *key, void *value) {
    (void)ctx;
    (void)key;
    dtor_calls++;
    dtor_value = value;
}

/* fill runs fill_u32 from module m over 64 words and checks them. */
static void fill(CUmodule m, unsigned v) {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "fill_u32"));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64 * 4));
    int n = 64;
    void *args[] = {&d, &v, &n};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    unsigned got[64];
    CHECK(cuMemcpyDtoH(got, d, sizeof got));
    for (int i = 0; i < 64; i++) EXPECT(got[i] == v);
    CHECK(cuMemFree(d));
}

int main(void) {
    /* Asked before cuInit, as runtimes do: the server driver's version (the simulator's 12.4),
     * capped at the API level the library serves. */
    int version = 0;
    CHECK(cuDriverGetVersion(&version));
    EXPECT(version == 12040);
    CHECK(cuInit(0));
    const void *t = (void *)1;
    EXPECT_RC(cuGetExportTable(NULL, &cudart_interface), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuGetExportTable(&t, NULL), CUDA_ERROR_INVALID_VALUE);
    /* The integrity digest is NVIDIA's own: not imitated, so not found. */
    EXPECT_RC(cuGetExportTable(&t, &integrity), CUDA_ERROR_NOT_FOUND);
    EXPECT(t == NULL);
    /* Tables of unknown meaning are served only for diagnosis, named in GPUCLOUD_PROBE_TABLES;
     * their slots fail, naming themselves. */
    EXPECT_RC(cuGetExportTable(&t, &f8cf), CUDA_ERROR_NOT_FOUND);
    setenv("GPUCLOUD_PROBE_TABLES", "f8cff951,d4082055", 1);
    const void *const *probe;
    CHECK(cuGetExportTable((const void **)&probe, &f8cf));
    EXPECT((uintptr_t)probe[0] == 3 * sizeof(void *));
    CHECK(cuGetExportTable((const void **)&probe, &integrity));
    uint64_t digest[2] = {7, 7};
    EXPECT_RC(((CUresult(*)(unsigned, uint64_t, uint64_t *))probe[1])(13000, 1, digest), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(digest[0] == 7 && digest[1] == 7);
    unsetenv("GPUCLOUD_PROBE_TABLES");
    EXPECT_RC(cuGetExportTable(&t, &integrity), CUDA_ERROR_NOT_FOUND);

    /* TOOLS_TLS and CONTEXT_CHECKS, sized as NVIDIA's driver serves them (gputests/exportprobe):
     * a context of this library has none of the conditions the checks ask about. */
    const void *const *tls;
    CHECK(cuGetExportTable((const void **)&tls, &tools_tls));
    EXPECT((uintptr_t)tls[0] == 3 * sizeof(void *));
    const void *const *ck;
    CHECK(cuGetExportTable((const void **)&ck, &checks));
    EXPECT((uintptr_t)ck[0] == 15 * sizeof(void *));
    uint32_t conditions = 0xdeadbeef;
    const void *detail = &conditions;
    CHECK(((CUresult(*)(CUcontext, uint32_t *, const void **))ck[2])(NULL, &conditions, &detail));
    EXPECT(conditions == 0 && detail == &conditions);
    EXPECT(((uint32_t(*)(void))ck[3])() == 0);
    EXPECT_RC(((CUresult(*)(void))ck[14])(), CUDA_ERROR_NOT_SUPPORTED);

    /* CUDART_INTERFACE: its size, then the primary context without a reference taken. */
    const void *const *ri;
    CHECK(cuGetExportTable((const void **)&ri, &cudart_interface));
    EXPECT((uintptr_t)ri[0] == 13 * sizeof(void *));
    CUcontext prim, got;
    CHECK(cuDevicePrimaryCtxRetain(&prim, 0));
    CHECK(((CUresult(*)(CUcontext *, CUdevice))ri[2])(&got, 0));
    EXPECT(got == prim);
    unsigned flags;
    int active;
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    EXPECT(active == 1); /* still our one reference */
    EXPECT_RC(((CUresult(*)(CUcontext *, CUdevice))ri[2])(&got, 99), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuCtxSetCurrent(prim));

    /* Modules from nvcc's fat-binary wrapper ([1]), and from the fat binary itself ([8]). */
    static unsigned char fat[SIM_FATBIN_SIZE];
    sim_fatbin(fat);
    struct {
        int magic, version;
        const void *data, *filename;
    } wrapper = {0x466243b1, 1, fat, NULL}, bad = {0x12345678, 1, fat, NULL};
    CUmodule m1, m8;
    CHECK(((CUresult(*)(CUmodule *, const void *))ri[1])(&m1, &wrapper));
    fill(m1, 0xC0DE0001u);
    EXPECT_RC(((CUresult(*)(CUmodule *, const void *))ri[1])(&m1, &bad), CUDA_ERROR_INVALID_VALUE);
    typedef CUresult (*ext8)(const void *, CUmodule *, void *, void *, unsigned);
    CHECK(((ext8)ri[8])(fat, &m8, NULL, NULL, 0));
    fill(m8, 0xC0DE0008u);
    EXPECT_RC(((ext8)ri[8])(sim_image, &m8, NULL, NULL, 0), CUDA_ERROR_INVALID_IMAGE); /* not a fat binary */
    EXPECT_RC(((ext8)ri[8])(fat, &m8, &wrapper, NULL, 1), CUDA_ERROR_NOT_SUPPORTED);   /* host variables */
    typedef CUresult (*ext6)(CUmodule *, const void *, void *, void *, unsigned);
    CHECK(((ext6)ri[6])(&m1, &wrapper, NULL, NULL, 0));
    fill(m1, 7);
    /* A slot whose meaning is unknown fails, naming itself on stderr. */
    EXPECT_RC(((CUresult(*)(void))ri[3])(), CUDA_ERROR_NOT_SUPPORTED);

    /* TOOLS_RUNTIME_CALLBACK_HOOKS: buffers the runtime may write. */
    const void *const *th;
    CHECK(cuGetExportTable((const void **)&th, &hooks));
    void *buf = NULL;
    size_t n = 0;
    ((void (*)(void **, size_t *))th[2])(&buf, &n);
    EXPECT(buf != NULL && n == 1024); /* a runtime refuses a driver offering fewer (CUDA 13) */
    memset(buf, 0xab, n * sizeof(uintptr_t));
    ((void (*)(void **, size_t *))th[6])(&buf, &n);
    EXPECT(buf != NULL && n == 14);
    memset(buf, 0xab, n * sizeof(uintptr_t));

    /* Context-local storage: per (context, key), NULL meaning the current context; destructors
     * run when the context goes. */
    const void *const *cl;
    CHECK(cuGetExportTable((const void **)&cl, &cls));
    typedef CUresult (*cls_set)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
    typedef CUresult (*cls_remove)(CUcontext, void *);
    typedef CUresult (*cls_get)(void **, CUcontext, void *);
    int key1, key2, value1, value2;
    void *v = NULL;
    EXPECT_RC(((cls_get)cl[2])(&v, NULL, &key1), CUDA_ERROR_INVALID_VALUE);
    CHECK(((cls_set)cl[0])(NULL, &key1, &value1, on_destroy));
    CHECK(((cls_set)cl[0])(prim, &key2, &value2, NULL));
    CHECK(((cls_get)cl[2])(&v, prim, &key1));
    EXPECT(v == &value1);
    CHECK(((cls_get)cl[2])(&v, NULL, &key2));
    EXPECT(v == &value2);
    CHECK(((cls_remove)cl[1])(prim, &key2));
    EXPECT_RC(((cls_get)cl[2])(&v, prim, &key2), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(((cls_remove)cl[1])(prim, &key2), CUDA_ERROR_INVALID_VALUE);
    /* Another context sees nothing of the primary's. */
    const void *const *bp;
    CHECK(cuGetExportTable((const void **)&bp, &bypass));
    EXPECT((uintptr_t)bp[0] == 2 * sizeof(void *));
    CUcontext mine;
    CHECK(((CUresult(*)(CUcontext *, unsigned, CUdevice))bp[1])(&mine, 0, 0)); /* cuCtxCreate: now current */
    CUdevice dev = -1;
    CHECK(cuCtxGetDevice(&dev));
    EXPECT(dev == 0);
    /* CUDA 13's forms take the context explicitly (NULL: the current one). */
    dev = -1;
    CHECK(cuCtxGetDevice_v2(&dev, prim));
    EXPECT(dev == 0);
    dev = -1;
    CHECK(cuCtxGetDevice_v2(&dev, NULL));
    EXPECT(dev == 0);
    EXPECT_RC(cuCtxGetDevice_v2(NULL, prim), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCtxSynchronize_v2(prim));
    CUcontext still = NULL;
    CHECK(cuCtxGetCurrent(&still));
    EXPECT(still == mine); /* synchronising another context leaves the current one */
    CHECK(cuCtxSynchronize_v2(NULL));
    EXPECT_RC(((cls_get)cl[2])(&v, NULL, &key1), CUDA_ERROR_INVALID_VALUE);
    CHECK(((cls_set)cl[0])(NULL, &key1, &value2, on_destroy));
    CHECK(cuCtxDestroy(mine));
    EXPECT(dtor_calls == 1 && dtor_value == &value2);
    CHECK(cuCtxSetCurrent(prim));
    CHECK(((cls_get)cl[2])(&v, NULL, &key1));
    EXPECT(v == &value1);
    CHECK(cuDevicePrimaryCtxReset(0)); /* cudaDeviceReset's path */
    EXPECT(dtor_calls == 2 && dtor_value == &value1);
    EXPECT_RC(((cls_get)cl[2])(&v, prim, &key1), CUDA_ERROR_INVALID_VALUE);

    /* cuGetProcAddress flags: a legacy lookup of a stream function finds the legacy function, a
     * per-thread lookup its _ptsz form (whose NULL stream is the thread's per-thread default
     * stream, ptds_test.c); unknown flag bits are refused. */
    void *fn = NULL, *legacy = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress("cuMemcpyAsync", &legacy, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    EXPECT(legacy == dlsym(RTLD_DEFAULT, "cuMemcpyAsync") && st == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(cuGetProcAddress("cuMemcpyAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuMemcpyAsync_ptsz") && st == CU_GET_PROC_ADDRESS_SUCCESS);
    /* A function without a per-thread form: the legacy one either way. */
    CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    EXPECT(fn != NULL && fn == dlsym(RTLD_DEFAULT, "cuMemAlloc"));
    /* An explicit per-thread name gets its exported form. */
    CHECK(cuGetProcAddress("cuMemcpyAsync_ptsz", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    EXPECT(fn != NULL && fn == dlsym(RTLD_DEFAULT, "cuMemcpyAsync_ptsz"));
    CHECK(cuGetProcAddress("cuLaunchKernel_ptsz", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    EXPECT(fn != NULL && fn == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"));
    EXPECT_RC(cuGetProcAddress("cuMemcpyAsync", &fn, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    /* Versions: the implementation a given CUDA version expects. */
    CHECK(cuGetProcAddress("cuEventElapsedTime", &fn, 12000, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuEventElapsedTime"));
    CHECK(cuGetProcAddress("cuEventElapsedTime", &fn, 12080, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuEventElapsedTime_v2"));
    CHECK(cuGetProcAddress("cuMemAlloc", &fn, 3010, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuMemAlloc"));
    CHECK(cuGetProcAddress("cuGetExportTable", &fn, 3000, 0, NULL));
    EXPECT(fn == (void *)cuGetExportTable);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    EXPECT_RC(cuGetProcAddress(longname, &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == NULL);

    /* A refused function is exported and found like any other, and fails saying so. */
    void *g1 = NULL, *g2 = NULL;
    CHECK(cuGetProcAddress("cuLaunchGrid", &g1, 12000, 0, &st));
    EXPECT(g1 != NULL && st == CU_GET_PROC_ADDRESS_SUCCESS && g1 == dlsym(RTLD_DEFAULT, "cuLaunchGrid"));
    CHECK(cuGetProcAddress("cuCheckpointProcessGetState", &g2, 12000, 0, NULL));
    EXPECT(g2 != NULL && g1 != g2);
    EXPECT_RC(((CUresult(*)(void *, int, int))g1)(NULL, 1, 1), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_RC(((CUresult(*)(void *, int, int))g1)(NULL, 1, 1), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_RC(cuGetProcAddress("notADriverFunction", &fn, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);
    CUmoduleLoadingMode mode = 0;
    CHECK(cuModuleGetLoadingMode(&mode));
    EXPECT(mode == CU_MODULE_LAZY_LOADING);
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    CHECK(cuModuleGetLoadingMode(&mode));
    EXPECT(mode == CU_MODULE_EAGER_LOADING);
    EXPECT_RC(cuModuleGetLoadingMode(NULL), CUDA_ERROR_INVALID_VALUE);
    printf("export_test: OK\n");
    return 0;
}

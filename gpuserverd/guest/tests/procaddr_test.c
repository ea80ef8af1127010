/* cuGetProcAddress must find every exported function by name: the names come on stdin (the
 * library's dynamic symbols), and each must resolve to the function dlsym finds. */
#define _GNU_SOURCE
#include "check.h"

#include <dlfcn.h>
#include <string.h>

int main(void) {
    char name[256];
    int n = 0;
    while (scanf("%255s", name) == 1) {
        void *fn = NULL, *direct = dlsym(RTLD_DEFAULT, name);
        CUdriverProcAddressQueryResult st;
        /* cudaVersion 0: the exact name, before any versioned remapping applies. */
        CHECK(cuGetProcAddress(name, &fn, 0, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        if (fn != direct || st != CU_GET_PROC_ADDRESS_SUCCESS) {
            fprintf(stderr, "cuGetProcAddress(%s) = %p, dlsym = %p\n", name, fn, direct);
            return 1;
        }
        n++;
    }
    /* Versioned lookups of plain names get the versioned implementations. */
    void *fn, *v2 = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, NULL));
    EXPECT(fn == v2);
    CHECK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuCtxCreate_v4"));
    CHECK(cuGetProcAddress("cuCtxCreate", &fn, 11000, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuCtxCreate_v2"));
    CHECK(cuGetProcAddress("cuCtxGetDevice", &fn, 13000, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuCtxGetDevice_v2"));
    CHECK(cuGetProcAddress("cuCtxGetDevice", &fn, 12090, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuCtxGetDevice"));
    CHECK(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, NULL));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuCtxSynchronize_v2"));
    /* Graph calls versioned with edge data (12.3), and the per-thread form of the version's own
     * function, not of a newer one with another ABI. */
    const struct {
        const char *name;
        int version;
        int per_thread;
        const char *want;
    } versioned[] = {
        {"cuGraphAddNode", 12020, 0, "cuGraphAddNode"},
        {"cuGraphAddNode", 12030, 0, "cuGraphAddNode_v2"},
        {"cuStreamUpdateCaptureDependencies", 11030, 0, "cuStreamUpdateCaptureDependencies"},
        {"cuStreamUpdateCaptureDependencies", 13000, 0, "cuStreamUpdateCaptureDependencies_v2"},
        {"cuStreamUpdateCaptureDependencies", 11030, 1, "cuStreamUpdateCaptureDependencies_ptsz"},
        {"cuStreamUpdateCaptureDependencies", 12030, 1, "cuStreamUpdateCaptureDependencies_v2_ptsz"},
        {"cuStreamGetCaptureInfo", 11030, 1, "cuStreamGetCaptureInfo_v2_ptsz"},
        {"cuStreamGetCaptureInfo", 13000, 1, "cuStreamGetCaptureInfo_v3_ptsz"},
        {"cuStreamBeginCaptureToGraph", 12030, 1, "cuStreamBeginCaptureToGraph_ptsz"},
        {"cuMemcpyHtoDAsync", 12000, 1, "cuMemcpyHtoDAsync_v2_ptsz"},
        {"cuGraphKernelNodeGetParams", 12000, 0, "cuGraphKernelNodeGetParams_v2"},
        {"cuTexRefSetAddress2D", 3020, 0, "cuTexRefSetAddress2D_v2"},
        {"cuTexRefSetAddress2D", 13000, 0, "cuTexRefSetAddress2D_v3"},
        {"cuDeviceGraphMemTrim", 13000, 1, "cuDeviceGraphMemTrim"}, /* no per-thread form: itself */
    };
    for (size_t i = 0; i < sizeof versioned / sizeof *versioned; i++) {
        CHECK(cuGetProcAddress(versioned[i].name, &fn, versioned[i].version,
                               versioned[i].per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, NULL));
        if (fn == NULL || fn != dlsym(RTLD_DEFAULT, versioned[i].want)) {
            fprintf(stderr, "cuGetProcAddress(%s, %d, %d) is not %s\n", versioned[i].name, versioned[i].version,
                    versioned[i].per_thread, versioned[i].want);
            return 1;
        }
    }
    /* No session here (the token is refused): the version is what the library offers. */
    int version = 0;
    CHECK(cuDriverGetVersion(&version));
    EXPECT(version == 13000);
    /* A per-thread name gets its exported form (which calls the legacy function). */
    CHECK(cuGetProcAddress("cuStreamSynchronize_ptsz", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn != NULL && fn == dlsym(RTLD_DEFAULT, "cuStreamSynchronize_ptsz"));
    CUdriverProcAddressQueryResult st;
    EXPECT_RC(cuGetProcAddress("cuNoSuchFunction", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* The v1 entry point (4 arguments) as the runtime of CUDA 11 calls it. */
    CUresult (*v1)(const char *, void **, int, cuuint64_t) = dlsym(RTLD_DEFAULT, "cuGetProcAddress");
    CHECK(v1("cuInit", &fn, 11000, 0));
    EXPECT(fn == dlsym(RTLD_DEFAULT, "cuInit"));
    printf("procaddr_test: OK %d names\n", n);
    return 0;
}

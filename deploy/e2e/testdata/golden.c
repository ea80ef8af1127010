/* The golden path's "program inside the VM": adds two vectors on the remote GPU through the
 * guest library, checks the result, and keeps the session open a little so it is metered.
 * Prints "GOLDEN OK <n>" on success; any failed call exits 1 naming it. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        CUresult r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) {                                                    \
            const char *s_ = NULL;                                                   \
            cuGetErrorName(r_, &s_);                                                 \
            fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call, r_, \
                    s_ ? s_ : "?");                                                  \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static const char module_image[] = "GPUSIM-MODULE 1\nkernel vector_add_f32\n";

int main(void) {
    enum { N = 1 << 16 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * (float)i;
    }
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    char name[128];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CUcontext ctx;
    CHECK(cuCtxCreate(&ctx, 0, dev));
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, sizeof a));
    CHECK(cuMemAlloc(&db, sizeof b));
    CHECK(cuMemAlloc(&dc, sizeof c));
    CHECK(cuMemcpyHtoD(da, a, sizeof a));
    CHECK(cuMemcpyHtoD(db, b, sizeof b));
    CUmodule mod;
    CUfunction fn;
    CHECK(cuModuleLoadData(&mod, module_image));
    CHECK(cuModuleGetFunction(&fn, mod, "vector_add_f32"));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(fn, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++) {
        if (c[i] != 3.0f * (float)i) {
            fprintf(stderr, "c[%d] = %f, want %f\n", i, c[i], 3.0f * (float)i);
            return 1;
        }
    }
    usleep(300 * 1000); /* hold the session so its GPU time is well above zero */
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuCtxDestroy(ctx));
    printf("GOLDEN OK %d on %s\n", N, name);
    return 0;
}

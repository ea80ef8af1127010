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

/* Hand-written PTX (no nvcc needed): a real GPU JIT-compiles it; the simulated backend runs its
 * built-in kernel of the same .entry name. One image serves both backends. */
static const char module_image[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry vector_add_f32(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)\n"
    "{\n"
    "  .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<4>; .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u32 %r1, [pn];\n"
    "  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r5, %r1; @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd4, %rd1; cvta.to.global.u64 %rd5, %rd2; cvta.to.global.u64 %rd6, %rd3;\n"
    "  mul.wide.u32 %rd7, %r5, 4; add.s64 %rd4, %rd4, %rd7; add.s64 %rd5, %rd5, %rd7; add.s64 %rd6, %rd6, %rd7;\n"
    "  ld.global.f32 %f1, [%rd4]; ld.global.f32 %f2, [%rd5]; add.f32 %f3, %f1, %f2; st.global.f32 [%rd6], %f3;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

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

/* Plain pinned memory over TCP (driver/coh_pinned.c, driver/coh_twin.c): cuMemAllocHost memory
 * costs no device memory until a kernel may see it; a kernel reads and writes it by its host
 * address; its device pointer is that address; copies from and to it stay right before and
 * after; and while a kernel runs that waits for the CPU (the simulated backend's latch_wait,
 * as UnifiedMemoryPerf's latch kernel does), the CPU's writes reach it, the CPU sees the
 * kernel's write, and the kernel's write to the same page survives the CPU's. Prints
 * "pinned_test: OK". */
#define _GNU_SOURCE
#include "check.h"

#include <stdint.h>
#include <time.h>

enum { N = 1 << 16 };

static const char image[] = "GPUSIM-MODULE 1\nkernel fill_u32\nkernel latch_wait\n";

/* wait_for: whether *p becomes v within 10 s (the CPU only reads: no call in between). */
static int wait_for(volatile unsigned *p, unsigned v) {
    for (int i = 0; i < 10000 && *p != v; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return *p == v;
}

int main(void) {
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill, latch_wait;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&fill, mod, "fill_u32"));
    CHECK(cuModuleGetFunction(&latch_wait, mod, "latch_wait"));

    /* Pinned memory only used for copies costs no device memory, and copies are right. */
    size_t free0, free1, total;
    CHECK(cuMemGetInfo(&free0, &total));
    unsigned *p;
    CHECK(cuMemAllocHost((void **)&p, N * 4));
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);
    for (int i = 0; i < N; i++) p[i] = (unsigned)i;
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, N * 4));
    CHECK(cuMemcpyHtoD(dev, p, N * 4));
    unsigned *back = malloc(N * 4);
    EXPECT(back != NULL);
    CHECK(cuMemcpyDtoH(back, dev, N * 4));
    for (int i = 0; i < N; i++) EXPECT(back[i] == (unsigned)i);

    /* Its host pointer passed to a kernel: the kernel writes the program's memory. Only it gets
     * device memory (the granularity's multiple), not its neighbours allocated around it. */
    unsigned *before, *after;
    CHECK(cuMemAllocHost((void **)&before, N * 4));
    CHECK(cuMemAllocHost((void **)&after, N * 4));
    size_t gran;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t free2, free3;
    CHECK(cuMemGetInfo(&free2, &total));
    unsigned seven = 7;
    int half = N / 2;
    CUdeviceptr dp = (CUdeviceptr)(uintptr_t)p;
    void *fill_args[] = {&dp, &seven, &half};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, NULL, fill_args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(p[i] == (i < N / 2 ? 7u : (unsigned)i));
    CHECK(cuMemGetInfo(&free3, &total));
    EXPECT(free2 - free3 == (N * 4 + gran - 1) / gran * gran);
    before[0] = 1, after[N - 1] = 2; /* still ordinary memory */
    CHECK(cuMemFreeHost(before));
    CHECK(cuMemFreeHost(after));
    /* Copies with it now name its device side: still the program's bytes either way. */
    p[N - 1] = 99;
    CHECK(cuMemcpyHtoD(dev, p, N * 4));
    CHECK(cuMemcpyDtoH(back, dev, N * 4));
    EXPECT(back[0] == 7 && back[N - 1] == 99 && back[N / 2] == (unsigned)(N / 2));
    CHECK(cuMemsetD32(dev, 5, N));
    CHECK(cuMemcpyDtoH(p, dev, N * 4));
    EXPECT(p[0] == 5 && p[N - 1] == 5);

    /* cuMemHostGetDevicePointer of another: its own address. */
    unsigned *q;
    CHECK(cuMemHostAlloc((void **)&q, 4096, CU_MEMHOSTALLOC_PORTABLE));
    CUdeviceptr dq;
    CHECK(cuMemHostGetDevicePointer(&dq, q + 3, 0));
    EXPECT(dq == (CUdeviceptr)(uintptr_t)(q + 3));

    /* A kernel that waits for the CPU, on a stream that is not the library's. The CPU's first
     * write comes while the kernel runs; the kernel's write to the same page (after 100 ms, once
     * the CPU holds its copy) reaches the CPU and is not overwritten by the CPU's pushes; the
     * second write, made just before a synchronization, reaches the kernel, which then ends. */
    unsigned *latch;
    CHECK(cuMemAllocHost((void **)&latch, 4096));
    latch[0] = latch[1] = 0;
    unsigned *out = latch + 16;
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CUdeviceptr dl = (CUdeviceptr)(uintptr_t)latch, dout = (CUdeviceptr)(uintptr_t)out;
    unsigned long long delay = 100 * 1000 * 1000ull;
    void *latch_args[] = {&dl, &dout, &delay};
    CHECK(cuLaunchKernel(latch_wait, 1, 1, 1, 1, 1, 1, 0, s, latch_args, NULL));
    latch[0] = 1;
    EXPECT(wait_for(out, 0xA11CE)); /* the kernel's write, seen while it runs */
    EXPECT(latch[0] == 1 && out[1] == 0);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* it waits for latch[1] */
    latch[1] = 2;
    CHECK(cuStreamSynchronize(s));
    EXPECT(out[0] == 0xA11CE && out[1] == 3 && latch[0] == 1 && latch[1] == 2);

    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFreeHost(latch));
    CHECK(cuMemFreeHost(q));
    CHECK(cuMemFreeHost(p));
    CHECK(cuMemFree(dev));
    free(back);
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);
    printf("pinned_test: OK\n");
    return 0;
}

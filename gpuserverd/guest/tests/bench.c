/* Measures the guest library's own overheads against whatever gpuserverd it reaches: copies at
 * several sizes, async launch rate, launch + synchronise, allocate + free. With the simulated
 * backend this is the wire and CPU cost alone; the GPU benchmark lives in gputests/. */
#include "check.h"

#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    size_t sizes[] = {1 << 20, 8 << 20, 64 << 20};
    void *host;
    CHECK(cuMemAllocHost(&host, 64 << 20));
    memset(host, 1, 64 << 20);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64 << 20));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        int reps = (int)((256 << 20) / n);
        double t0 = now();
        for (int r = 0; r < reps; r++) CHECK(cuMemcpyHtoD(d, host, n));
        double t1 = now();
        for (int r = 0; r < reps; r++) CHECK(cuMemcpyDtoH(host, d, n));
        double t2 = now();
        printf("copy %3zu MiB  H2D %6.2f GB/s  D2H %6.2f GB/s\n", n >> 20, reps * n / (t1 - t0) / 1e9, reps * n / (t2 - t1) / 1e9);
    }
    CUmodule mod;
    CUfunction spin;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    unsigned long long zero = 0;
    void *args[] = {&zero};
    int launches = 20000;
    double t0 = now();
    for (int i = 0; i < launches; i++) CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    double t1 = now();
    printf("async launch  %6.2f us/launch\n", (t1 - t0) / launches * 1e6);
    int rounds = 2000;
    t0 = now();
    for (int i = 0; i < rounds; i++) {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
    }
    t1 = now();
    printf("launch+sync   %6.2f us\n", (t1 - t0) / rounds * 1e6);
    t0 = now();
    for (int i = 0; i < rounds; i++) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 1 << 20));
        CHECK(cuMemFree(p));
    }
    t1 = now();
    printf("alloc+free    %6.2f us\n", (t1 - t0) / rounds * 1e6);

    /* 64 MiB copies by host memory kind: pinned (above), registered (page-aligned malloc +
     * cuMemHostRegister), pageable; and what registering and unregistering 64 MiB costs. */
    size_t n = 64u << 20;
    void *reg = aligned_alloc(4096, n), *pageable = malloc(n);
    EXPECT(reg && pageable);
    memset(reg, 2, n);
    memset(pageable, 3, n);
    int regs = 10;
    t0 = now();
    for (int i = 0; i < regs; i++) {
        CHECK(cuMemHostRegister(reg, n, 0));
        CHECK(cuMemHostUnregister(reg));
    }
    t1 = now();
    printf("register+unregister 64 MiB %8.1f us\n", (t1 - t0) / regs * 1e6);
    CHECK(cuMemHostRegister(reg, n, 0));
    void *kinds[] = {host, reg, pageable};
    const char *names[] = {"pinned", "registered", "pageable"};
    for (int k = 0; k < 3; k++) {
        int reps = 4;
        t0 = now();
        for (int r = 0; r < reps; r++) CHECK(cuMemcpyHtoD(d, kinds[k], n));
        t1 = now();
        for (int r = 0; r < reps; r++) CHECK(cuMemcpyDtoH(kinds[k], d, n));
        double t2 = now();
        printf("copy 64 MiB %-10s H2D %6.2f GB/s  D2H %6.2f GB/s\n", names[k], reps * n / (t1 - t0) / 1e9, reps * n / (t2 - t1) / 1e9);
    }
    CHECK(cuMemHostUnregister(reg));
    free(reg);
    free(pageable);
    return 0;
}

/* Measures a simple loop over managed memory against the same loop with explicit copies: the CPU
 * writes x, a kernel computes y = 2x + y, the CPU reads y. Over TCP managed memory is kept
 * coherent by the guest library (driver/coherence.c), so this prices the faults, the waits and
 * the page transfers against cuMemcpy. Also a sparse loop: the CPU writes one element and reads
 * one per iteration. Prints one line per case; measures, asserts only the results. */
#include "check.h"

#include <stdint.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static CUfunction saxpy;

static void launch(CUdeviceptr x, CUdeviceptr y, int n) {
    float a = 2.0f;
    void *args[] = {&a, &x, &y, &n};
    CHECK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

static double explicit_loop(int n, int iters, int sparse) {
    float *hx = calloc(n, 4), *hy = calloc(n, 4);
    EXPECT(hx && hy);
    CUdeviceptr x, y;
    CHECK(cuMemAlloc(&x, n * 4u));
    CHECK(cuMemAlloc(&y, n * 4u));
    CHECK(cuMemsetD8(y, 0, n * 4u));
    double t0 = now_ms(), sum = 0;
    for (int it = 0; it < iters; it++) {
        if (sparse) {
            hx[it % n] = 1.0f;
            CHECK(cuMemcpyHtoD(x + (it % n) * 4u, hx + it % n, 4));
        } else {
            for (int i = 0; i < n; i++) hx[i] = 1.0f;
            CHECK(cuMemcpyHtoD(x, hx, n * 4u));
        }
        launch(x, y, n);
        CHECK(cuCtxSynchronize());
        if (sparse) {
            CHECK(cuMemcpyDtoH(hy + it % n, y + (it % n) * 4u, 4));
            sum += hy[it % n];
        } else {
            CHECK(cuMemcpyDtoH(hy, y, n * 4u));
            for (int i = 0; i < n; i++) sum += hy[i];
        }
    }
    double ms = (now_ms() - t0) / iters;
    EXPECT(sum > 0);
    CHECK(cuMemFree(x));
    CHECK(cuMemFree(y));
    free(hx), free(hy);
    return ms;
}

static double managed_loop(int n, int iters, int sparse) {
    CUdeviceptr x, y;
    CHECK(cuMemAllocManaged(&x, n * 4u, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&y, n * 4u, CU_MEM_ATTACH_GLOBAL));
    float *hx = (float *)(uintptr_t)x, *hy = (float *)(uintptr_t)y;
    double t0 = now_ms(), sum = 0;
    for (int it = 0; it < iters; it++) {
        if (sparse) hx[it % n] = 1.0f;
        else
            for (int i = 0; i < n; i++) hx[i] = 1.0f;
        launch(x, y, n);
        CHECK(cuCtxSynchronize());
        if (sparse) sum += hy[it % n];
        else
            for (int i = 0; i < n; i++) sum += hy[i];
    }
    double ms = (now_ms() - t0) / iters;
    EXPECT(sum > 0);
    CHECK(cuMemFree(x));
    CHECK(cuMemFree(y));
    return ms;
}

int main(void) {
    saxpy = sim_kernel("saxpy_f32", NULL);
    int sizes[] = {16 << 10, 256 << 10, 4 << 20}; /* floats: 64 KiB, 1 MiB, 16 MiB */
    for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int n = sizes[k], iters = n >= (4 << 20) ? 5 : 20;
        double e = explicit_loop(n, iters, 0), m = managed_loop(n, iters, 0);
        printf("dense  %8d KiB x2: explicit copies %8.2f ms/iter, managed %8.2f ms/iter (%.2fx)\n", n / 256, e, m, m / e);
        e = explicit_loop(n, iters, 1), m = managed_loop(n, iters, 1);
        printf("sparse %8d KiB x2: explicit copies %8.2f ms/iter, managed %8.2f ms/iter (%.2fx)\n", n / 256, e, m, m / e);
    }
    return 0;
}

/* steady <iterations> <pause-ms>: a program that keeps working while its session's server is
 * restarted or its connection cut (guesttest's restart tests). Each iteration fills two vectors
 * of 2 MiB with values of that iteration (striped over the lanes when the session has them),
 * adds them with a kernel, copies the sum back and checks it element by element, then sleeps
 * pause-ms. Prints "STEADY RUNNING" after the first iteration and "STEADY OK <iterations>" at the
 * end; any wrong element or failed call ends it with status 1. */
#include <time.h>

#include "check.h"

int main(int argc, char **argv) {
    EXPECT(argc == 3);
    int iters = atoi(argv[1]), pause_ms = atoi(argv[2]);
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CUfunction add;
    CHECK(cuModuleGetFunction(&add, mod, "vector_add_f32"));
    enum { N = 1 << 19 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    EXPECT(a && b && c);
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, N * sizeof *a));
    CHECK(cuMemAlloc(&db, N * sizeof *b));
    CHECK(cuMemAlloc(&dc, N * sizeof *c));
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < N; i++) {
            a[i] = (float)(i % 1000) + (float)it;
            b[i] = (float)(it % 7);
        }
        CHECK(cuMemcpyHtoD(da, a, N * sizeof *a));
        CHECK(cuMemcpyHtoD(db, b, N * sizeof *b));
        int n = N;
        void *args[] = {&da, &db, &dc, &n};
        CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        memset(c, 0, N * sizeof *c);
        CHECK(cuMemcpyDtoH(c, dc, N * sizeof *c));
        for (int i = 0; i < N; i++)
            if (c[i] != a[i] + b[i]) {
                printf("STEADY WRONG iteration %d at %d: %f + %f = %f\n", it, i, a[i], b[i], c[i]);
                return 1;
            }
        if (it == 0) {
            printf("STEADY RUNNING\n");
            fflush(stdout);
        }
        struct timespec ts = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    printf("STEADY OK %d\n", iters);
    return 0;
}

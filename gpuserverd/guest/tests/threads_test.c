/* Several threads share the one connection: each allocates, copies its own pattern through the
 * device, launches and checks, concurrently. Prints "threads_test: OK". */
#include "check.h"

#include <pthread.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 50
#define N 4096

static CUcontext primary;
static CUfunction fill;

static void *worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(primary));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned *h = malloc(N * 4), *back = malloc(N * 4);
    for (int r = 0; r < ROUNDS; r++) {
        CUdeviceptr d;
        CHECK(cuMemAlloc(&d, N * 4));
        for (int i = 0; i < N; i++) h[i] = id << 24 | r << 12 | i;
        CHECK(cuMemcpyHtoDAsync(d, h, N * 4, s));
        unsigned v = id << 24 | r;
        int n = N / 2;
        void *args[] = {&d, &v, &n};
        CHECK(cuLaunchKernel(fill, N / 2 / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
        CHECK(cuMemcpyDtoHAsync(back, d, N * 4, s));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++) EXPECT(back[i] == (i < N / 2 ? v : h[i]));
        CHECK(cuMemFree(d));
    }
    CHECK(cuStreamDestroy(s));
    free(h);
    free(back);
    return NULL;
}

int main(void) {
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&primary, 0));
    CHECK(cuCtxSetCurrent(primary));
    CUmodule mod;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CHECK(cuModuleGetFunction(&fill, mod, "fill_u32"));
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("threads_test: OK\n");
    return 0;
}

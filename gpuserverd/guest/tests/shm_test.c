/* Copies through the shared arena (run with GPUCLOUD_ENDPOINT=unix:... and a small
 * GPUCLOUD_SHM_MIB, so copies span many staging chunks and the arena can run out):
 * pageable copies of sizes that end mid-chunk, pinned copies sync and async, pinned memory reused
 * after free, and a pinned allocation larger than the arena falling back to ordinary memory. */
#include "check.h"

#include <stdint.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed + (i >> 12));
}

int main(void) {
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));

    /* Pageable, both ways, 13 MiB + 123 bytes: many staging chunks, the last one partial. */
    size_t n = (13u << 20) + 123;
    unsigned char *src = malloc(n), *dst = malloc(n);
    EXPECT(src && dst);
    fill(src, n, 1);
    CUdeviceptr d, d2;
    CHECK(cuMemAlloc(&d, n));
    CHECK(cuMemAlloc(&d2, n));
    CHECK(cuMemcpyHtoD(d, src, n));
    memset(dst, 0, n);
    CHECK(cuMemcpyDtoH(dst, d, n));
    EXPECT(memcmp(src, dst, n) == 0);

    /* Pageable async on a stream: done when the call returns or at the latest at the sync. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    fill(src, n, 2);
    CHECK(cuMemcpyHtoDAsync(d2, src, n, s));
    memset(dst, 0, n);
    CHECK(cuMemcpyDtoHAsync(dst, d2, n, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(src, dst, n) == 0);

    /* Pinned: from the arena, sync and async. */
    size_t pn = 3u << 20;
    unsigned char *pin, *pin2;
    CHECK(cuMemAllocHost((void **)&pin, pn));
    CHECK(cuMemHostAlloc((void **)&pin2, pn, 0));
    EXPECT(pin != pin2);
    fill(pin, pn, 3);
    CHECK(cuMemcpyHtoD(d, pin, pn));
    memset(pin2, 0, pn);
    CHECK(cuMemcpyDtoH(pin2, d, pn));
    EXPECT(memcmp(pin, pin2, pn) == 0);
    fill(pin, pn, 4);
    CHECK(cuMemcpyHtoDAsync(d2 + 5, pin, pn, s));
    CHECK(cuMemcpyDtoHAsync(pin2, d2 + 5, pn, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(pin, pin2, pn) == 0);
    /* An unaligned piece of pinned memory to a pageable buffer and back. */
    CHECK(cuMemcpyDtoH(dst, d2 + 5 + 1000, 4096));
    EXPECT(memcmp(dst, pin + 1000, 4096) == 0);

    /* Freed pinned memory is reused; an allocation larger than the arena still succeeds. */
    CHECK(cuMemFreeHost(pin2));
    unsigned char *pin3;
    CHECK(cuMemAllocHost((void **)&pin3, pn));
    EXPECT(pin3 == pin2);
    unsigned char *big;
    CHECK(cuMemAllocHost((void **)&big, 64u << 20));
    fill(big, 64u << 20, 5);
    CUdeviceptr db;
    CHECK(cuMemAlloc(&db, 64u << 20));
    CHECK(cuMemcpyHtoD(db, big, 64u << 20));
    CHECK(cuMemcpyDtoH(src, db + (64u << 20) - n, n));
    EXPECT(memcmp(src, big + (64u << 20) - n, n) == 0);
    CHECK(cuMemFreeHost(big));
    CHECK(cuMemFreeHost(pin3));
    CHECK(cuMemFreeHost(pin));

    /* A copy past a device allocation fails and the session goes on. */
    EXPECT_RC(cuMemcpyHtoD(d + n - 10, src, 4096), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyHtoD(d, src, 4096));
    CHECK(cuCtxDestroy(ctx));
    printf("shm_test: ok\n");
    return 0;
}

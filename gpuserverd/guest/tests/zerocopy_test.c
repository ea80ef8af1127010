/* Zero-copy: mapped pinned memory (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP) reached by a
 * kernel through cuMemHostGetDevicePointer: what the kernel writes the program reads in its own
 * buffer (after synchronizing), and what the program writes the device reads. Over shared memory
 * ("shm") the buffer lies in the arena the worker registered device-mapped, with no copy; over
 * TCP ("tcp") it is device memory kept coherent with the program's pages at the same address, so
 * the device pointer is the buffer's own, and other host memory has none
 * (CUDA_ERROR_NOT_SUPPORTED). Prints "zerocopy_test: OK". */
#include "check.h"

#include <stdint.h>

enum { N = 1 << 16 };

int main(int argc, char **argv) {
    int shm = argc > 1 && strcmp(argv[1], "shm") == 0;
    CUfunction fill = sim_kernel("fill_u32", NULL);
    unsigned *h;
    CHECK(cuMemHostAlloc((void **)&h, N * sizeof *h, CU_MEMHOSTALLOC_DEVICEMAP));
    for (int i = 0; i < N; i++) h[i] = 0xdead0000u | (unsigned)i;
    CUdeviceptr d = 0;
    CHECK(cuMemHostGetDevicePointer(&d, h, 0));
    EXPECT(d != 0);
    /* Unified addressing: the pinned pointer is the device's too (the arena lies at its device
     * address; over TCP the coherent copy does), and a kernel given the program's pointer itself
     * reaches the same bytes. */
    EXPECT(d == (CUdeviceptr)(uintptr_t)h);
    {
        CUdeviceptr hp = (CUdeviceptr)(uintptr_t)(h + N / 2);
        unsigned w = 0xfeed;
        int m = 256;
        void *a[] = {&hp, &w, &m};
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, NULL, a, NULL));
        CHECK(cuCtxSynchronize());
        for (int i = 0; i < 256; i++) EXPECT(h[N / 2 + i] == w);
        for (int i = 0; i < 256; i++) h[N / 2 + i] = 0xdead0000u | (unsigned)(N / 2 + i);
    }
    CUdeviceptr d2;
    CHECK(cuMemHostGetDevicePointer(&d2, h + 100, 0));
    EXPECT(d2 == d + 100 * sizeof *h);
    /* The kernel writes the first half through the device address; the program reads its buffer. */
    unsigned v = 0x5eed;
    int n = N / 2;
    void *args[] = {&d, &v, &n};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(h[i] == (i < N / 2 ? v : (0xdead0000u | (unsigned)i)));
    /* The program writes its buffer; the device reads it at the device address. */
    for (int i = 0; i < N; i++) h[i] = (unsigned)i * 3;
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, N * sizeof *h));
    CHECK(cuMemcpyDtoD(dev, d, N * sizeof *h));
    unsigned *back = malloc(N * sizeof *back);
    EXPECT(back != NULL);
    CHECK(cuMemcpyDtoH(back, dev, N * sizeof *back));
    for (int i = 0; i < N; i++) EXPECT(back[i] == (unsigned)i * 3);
    /* Memory outside the arena has no device address. */
    EXPECT_RC(cuMemHostGetDevicePointer(&d2, back, 0), shm ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_RC(cuMemHostGetDevicePointer(&d2, h, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree(dev));
    CHECK(cuMemFreeHost(h));
    free(back);
    printf("zerocopy_test: OK\n");
    return 0;
}

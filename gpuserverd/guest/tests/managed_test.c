/* Managed memory: cuMemAllocManaged gives one pointer that the program dereferences and a kernel
 * is handed alike: what the kernel writes the program reads at the same pointer (after
 * synchronizing), what the program writes the device reads. Hints succeed for it and not for
 * other memory; it is freed by cuMemFree. Over shared memory ("shm") it is one copy in the arena;
 * over TCP ("tcp", or "coherent": over shared memory with GPUCLOUD_MANAGED=coherent) device
 * memory kept coherent with the program's pages by the guest library, and the device reports no
 * concurrent managed access. Prints "managed_test: OK". */
#include "check.h"

#include <stdint.h>

enum { N = 1 << 16 };

int main(int argc, char **argv) {
    int shm = argc > 1 && strcmp(argv[1], "shm") == 0;
    CUfunction fill = sim_kernel("fill_u32", NULL);
    CUdeviceptr m = 0;
    int concurrent = -1;
    CHECK(cuDeviceGetAttribute(&concurrent, 89, 0)); /* CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS */
    if (!shm) EXPECT(concurrent == 0);
    EXPECT_RC(cuMemAllocManaged(&m, N * 4, 7), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocManaged(&m, N * 4, CU_MEM_ATTACH_GLOBAL));
    unsigned *h = (unsigned *)(uintptr_t)m; /* the same pointer, on the host */
    for (int i = 0; i < N; i++) h[i] = (unsigned)i;
    CHECK(cuMemPrefetchAsync(m, N * 4, 0, NULL));
    CHECK(cuStreamAttachMemAsync(NULL, m, 0, 0));
    unsigned v = 0xbeef;
    int n = N / 2;
    void *args[] = {&m, &v, &n};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(h[i] == (i < N / 2 ? v : (unsigned)i));
    /* The device reads what the program wrote, at the same pointer. */
    for (int i = 0; i < N; i++) h[i] = (unsigned)i * 7;
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, N * 4));
    CHECK(cuMemcpyDtoD(dev, m, N * 4));
    unsigned *back = malloc(N * 4);
    EXPECT(back != NULL);
    CHECK(cuMemcpyDtoH(back, dev, N * 4));
    for (int i = 0; i < N; i++) EXPECT(back[i] == (unsigned)i * 7);
    /* Hints are for managed memory only. */
    EXPECT_RC(cuMemPrefetchAsync(dev, N * 4, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree(m));
    CUdeviceptr again;
    CHECK(cuMemAllocManaged(&again, N * 4, CU_MEM_ATTACH_HOST));
    ((unsigned *)(uintptr_t)again)[N - 1] = 42;
    CHECK(cuMemcpyDtoH(back, again + (N - 1) * 4, 4));
    EXPECT(back[0] == 42);
    CHECK(cuMemFree(again));
    CHECK(cuMemFree(dev));
    free(back);
    printf("managed_test: OK\n");
    return 0;
}

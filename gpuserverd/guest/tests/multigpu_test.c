/* A session granted two GPUs: a context on each, allocations and copies on both, switching by
 * pushing and popping contexts. Prints "multigpu_test: OK". */
#include "check.h"

#include <string.h>

int main(void) {
    CHECK(cuInit(0));
    int n;
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == 2);
    char pci0[32], pci1[32];
    CHECK(cuDeviceGetPCIBusId(pci0, sizeof pci0, 0));
    CHECK(cuDeviceGetPCIBusId(pci1, sizeof pci1, 1));
    EXPECT(strcmp(pci0, pci1) != 0);
    CUcontext c0, c1;
    CHECK(cuCtxCreate(&c0, 0, 0));
    CUdeviceptr p0, p1;
    CHECK(cuMemAlloc(&p0, 4096));
    CHECK(cuCtxCreate(&c1, 0, 1)); /* now current */
    CUdevice d;
    CHECK(cuCtxGetDevice(&d));
    EXPECT(d == 1);
    CHECK(cuMemAlloc(&p1, 4096));
    EXPECT((p0 >> 40) != (p1 >> 40)); /* each device has its own address range */
    CHECK(cuMemsetD32(p1, 11, 1024));
    CHECK(cuCtxPushCurrent(c0));
    CHECK(cuMemsetD32(p0, 22, 1024));
    /* p1 lives on device 1: device 0's context cannot touch it. */
    EXPECT_RC(cuMemsetD32(p1, 33, 1), CUDA_ERROR_INVALID_VALUE);
    unsigned v = 0;
    CHECK(cuMemcpyDtoH(&v, p0 + 4092, 4));
    EXPECT(v == 22);
    CHECK(cuCtxPopCurrent(NULL));
    CHECK(cuMemcpyDtoH(&v, p1 + 4092, 4));
    EXPECT(v == 11);
    CHECK(cuMemFree(p1));
    CHECK(cuCtxDestroy(c1));
    CHECK(cuCtxDestroy(c0));
    printf("multigpu_test: OK\n");
    return 0;
}

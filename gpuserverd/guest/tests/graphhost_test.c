/* Graphs that copy to and from the program's pinned memory, over shared memory: the memory lies in
 * the arena, which the device reaches at the graph's replay, so stream capture of host copies and
 * memcpy nodes with host sides are kept (as copies from and to the arena's device address) rather
 * than refused. Each replay reads the input as the program left it just before the launch. Prints
 * "graphhost_test: OK". */
#include "check.h"

enum { N = 1 << 14 };

int main(void) {
    CUfunction fill = sim_kernel("fill_u32", NULL);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned *in, *out;
    CHECK(cuMemAllocHost((void **)&in, N * 4));
    CHECK(cuMemAllocHost((void **)&out, N * 4));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N * 4));
    unsigned v = 77;
    int n = N / 2;
    void *args[] = {&d, &v, &n};
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync(d, in, N * 4, s));
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CHECK(cuMemcpyDtoHAsync(out, d, N * 4, s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g)); /* not invalidated */
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (unsigned round = 1; round <= 2; round++) {
        for (int i = 0; i < N; i++) in[i] = round * 100000 + (unsigned)i, out[i] = 0;
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++) EXPECT(out[i] == (i < N / 2 ? v : round * 100000 + (unsigned)i));
    }
    /* A memcpy node from the program's pinned memory to the device, and one back. */
    CUgraph h;
    CHECK(cuGraphCreate(&h, 0));
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = d, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    CUDA_MEMCPY3D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d, .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = out, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    CUgraphNode a, b;
    CHECK(cuGraphAddMemcpyNode(&a, h, NULL, 0, &up, NULL));
    CHECK(cuGraphAddMemcpyNode(&b, h, &a, 1, &down, NULL));
    CUgraphExec y;
    CHECK(cuGraphInstantiate(&y, h, 0));
    for (int i = 0; i < N; i++) in[i] = (unsigned)i * 5, out[i] = 0;
    CHECK(cuGraphLaunch(y, s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(out[i] == (unsigned)i * 5);
    /* Memory outside the arena goes through bounce buffers (graphpageable_test); a copy from host
     * to host memory in a graph stays refused. */
    unsigned *plain = malloc(N * 4), *plain2 = malloc(N * 4);
    EXPECT(plain != NULL && plain2 != NULL);
    CUDA_MEMCPY3D hh = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = plain, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = plain2, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    EXPECT_RC(cuGraphAddMemcpyNode(&a, h, NULL, 0, &hh, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(h));
    free(plain), free(plain2);
    printf("graphhost_test: OK\n");
    return 0;
}

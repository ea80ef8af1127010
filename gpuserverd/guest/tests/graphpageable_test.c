/* Graphs that copy to and from the program's pageable memory (malloc'd, outside any arena): memcpy
 * nodes and captured copies go through bounce buffers the guest fills before each launch and
 * empties after it, so each launch reads the host bytes as the program left them and its results
 * are there once the stream is synchronised. Also: a captured sequence ending in a small
 * device-to-host copy (as NVIDIA's conjugateGradientCudaGraphs reads its residual), pitched host
 * sides, an executable graph updated from another graph, the bounce memory given back on destroy
 * and when a capture is invalidated, bad parameters refused. Prints "graphpageable_test: OK". */
#include "check.h"

enum { N = 1 << 12 };

static size_t device_free(void) {
    size_t f, t;
    CHECK(cuMemGetInfo(&f, &t));
    return f;
}

/* A graph: in -> d (memcpy node), fill d's first half with v (kernel node), d -> out. */
static CUgraph copy_graph(CUfunction fill, CUdeviceptr d, unsigned *in, unsigned *out, unsigned *v, int *half) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = d, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    CUDA_MEMCPY3D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d, .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = out, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    void *args[] = {&d, v, half};
    CUDA_KERNEL_NODE_PARAMS k = {.func = fill, .gridDimX = N / 2 / 256, .gridDimY = 1, .gridDimZ = 1,
                                 .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
    CUgraphNode a, b, c;
    CHECK(cuGraphAddMemcpyNode(&a, g, NULL, 0, &up, NULL));
    CHECK(cuGraphAddKernelNode(&b, g, &a, 1, &k));
    CHECK(cuGraphAddMemcpyNode(&c, g, &b, 1, &down, NULL));
    return g;
}

int main(void) {
    CUfunction fill = sim_kernel("fill_u32", NULL);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned *in = malloc(N * 4), *out = malloc(N * 4), *in2 = malloc(N * 4), *out2 = malloc(N * 4);
    EXPECT(in && out && in2 && out2);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N * 4));
    unsigned v = 77;
    int half = N / 2;
    size_t free0 = device_free();

    /* Memcpy nodes: the host data changes between launches, each launch sees the new bytes. */
    CUgraph g = copy_graph(fill, d, in, out, &v, &half);
    EXPECT(device_free() <= free0 - 2 * N * 4); /* two bounce buffers, charged as allocations */
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphDestroy(g)); /* the executable graph keeps the bounce buffers */
    for (unsigned round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) in[i] = round * 100000 + (unsigned)i, out[i] = 0;
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++) EXPECT(out[i] == (i < N / 2 ? v : round * 100000 + (unsigned)i));
    }

    /* Updated from a graph of the same shape over other host buffers: launches use those. */
    CUgraph g2 = copy_graph(fill, d, in2, out2, &v, &half);
    CUgraphExecUpdateResultInfo info;
    CHECK(cuGraphExecUpdate(x, g2, &info));
    CHECK(cuGraphDestroy(g2));
    for (int i = 0; i < N; i++) in2[i] = 9000000 + (unsigned)i, out2[i] = 0, out[i] = 1;
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(out2[i] == (i < N / 2 ? v : 9000000 + (unsigned)i) && out[i] == 1);
    CHECK(cuGraphExecDestroy(x));
    EXPECT(device_free() == free0); /* graph and executable graph gone: bounce buffers freed */

    /* Pitched host sides: 8 rows of 64 bytes from rows of 100 (at byte 4), back into rows of 80
     * (at byte 8). */
    enum { W = 64, H = 8, SP = 100, DP = 80 };
    unsigned char *src2d = malloc(SP * H), *dst2d = malloc(DP * H);
    EXPECT(src2d && dst2d);
    CUdeviceptr d2;
    CHECK(cuMemAlloc(&d2, W * H));
    CUgraph p;
    CHECK(cuGraphCreate(&p, 0));
    CUDA_MEMCPY3D up2 = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = src2d, .srcPitch = SP, .srcXInBytes = 4,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = d2, .dstPitch = W,
                         .WidthInBytes = W, .Height = H, .Depth = 1};
    CUDA_MEMCPY3D down2 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d2, .srcPitch = W,
                           .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = dst2d, .dstPitch = DP, .dstXInBytes = 8,
                           .WidthInBytes = W, .Height = H, .Depth = 1};
    CUgraphNode n1, n2;
    CHECK(cuGraphAddMemcpyNode(&n1, p, NULL, 0, &up2, NULL));
    CHECK(cuGraphAddMemcpyNode(&n2, p, &n1, 1, &down2, NULL));
    CUgraphExec px;
    CHECK(cuGraphInstantiate(&px, p, 0));
    for (unsigned round = 1; round <= 2; round++) {
        for (int i = 0; i < SP * H; i++) src2d[i] = (unsigned char)(i * 7 + round);
        memset(dst2d, 0xEE, DP * H);
        CHECK(cuGraphLaunch(px, s));
        CHECK(cuStreamSynchronize(s));
        for (int r = 0; r < H; r++)
            for (int c = 0; c < DP; c++) {
                unsigned char want = c >= 8 && c < 8 + W ? (unsigned char)((r * SP + 4 + c - 8) * 7 + round) : 0xEE;
                EXPECT(dst2d[r * DP + c] == want);
            }
    }
    CHECK(cuGraphExecDestroy(px));
    CHECK(cuGraphDestroy(p));

    /* A captured sequence from and to pageable memory, ending in a 4-byte read of one result (as
     * conjugateGradientCudaGraphs reads r1 after each launch and synchronisation). */
    unsigned r1 = 0;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync(d, in, N * 4, s));
    void *args[] = {&d, &v, &half};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CHECK(cuMemcpyDtoHAsync(out, d, N * 4, s));
    CHECK(cuMemcpyDtoHAsync(&r1, d + (N - 1) * 4, 4, s));
    CUgraph cg;
    CHECK(cuStreamEndCapture(s, &cg)); /* not invalidated */
    CUgraphExec cx;
    CHECK(cuGraphInstantiate(&cx, cg, 0));
    CUstream other; /* the sample launches on a stream of its own, not the one it captured */
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    for (unsigned round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) in[i] = round * 1000 + (unsigned)i, out[i] = 0;
        r1 = 0;
        CUstream on = round == 2 ? other : s;
        CHECK(cuGraphLaunch(cx, on));
        CHECK(cuStreamSynchronize(on));
        EXPECT(r1 == round * 1000 + N - 1);
        for (int i = 0; i < N; i++) EXPECT(out[i] == (i < N / 2 ? v : round * 1000 + (unsigned)i));
    }
    CHECK(cuGraphExecDestroy(cx));
    CHECK(cuGraphDestroy(cg));
    CHECK(cuStreamDestroy(other));
    CHECK(cuMemFree(d2));
    EXPECT(device_free() == free0);

    /* A capture invalidated after a pageable copy (a 3-D host copy cannot be captured) ends with
     * no graph and gives the copy's bounce buffer back. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync(d, in, N * 4, s));
    EXPECT(device_free() < free0);
    CUDA_MEMCPY3D host3d = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                            .dstDevice = d, .WidthInBytes = 16, .Height = 2, .Depth = 1};
    EXPECT_RC(cuMemcpy3DAsync(&host3d, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_RC(cuStreamEndCapture(s, &cg), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(device_free() == free0);

    /* Bad parameters are still refused, and leave no bounce buffer behind. */
    CUgraph b;
    CHECK(cuGraphCreate(&b, 0));
    CUgraphNode bad;
    CUDA_MEMCPY3D hh = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = out, .WidthInBytes = 16, .Height = 1, .Depth = 1};
    EXPECT_RC(cuGraphAddMemcpyNode(&bad, b, NULL, 0, &hh, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CUDA_MEMCPY3D nullhost = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = NULL,
                              .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = d, .WidthInBytes = 16, .Height = 1,
                              .Depth = 1};
    EXPECT_RC(cuGraphAddMemcpyNode(&bad, b, NULL, 0, &nullhost, NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY3D narrow = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .srcPitch = 8,
                            .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = d, .WidthInBytes = 16, .Height = 2,
                            .Depth = 1};
    EXPECT_RC(cuGraphAddMemcpyNode(&bad, b, NULL, 0, &narrow, NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY3D empty = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                           .dstDevice = d, .WidthInBytes = 0, .Height = 1, .Depth = 1};
    EXPECT_RC(cuGraphAddMemcpyNode(&bad, b, NULL, 0, &empty, NULL), CUDA_ERROR_INVALID_VALUE);
    CUgraphNode ghost = (CUgraphNode)(uintptr_t)0xdead00;
    CUDA_MEMCPY3D fine = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                          .dstDevice = d, .WidthInBytes = 16, .Height = 1, .Depth = 1};
    EXPECT(cuGraphAddMemcpyNode(&bad, b, &ghost, 1, &fine, NULL) != CUDA_SUCCESS); /* unknown dependency */
    EXPECT(device_free() == free0);
    CHECK(cuGraphDestroy(b));
    EXPECT(device_free() == free0);

    CHECK(cuMemFree(d));
    free(in), free(out), free(in2), free(out2), free(src2d), free(dst2d);
    printf("graphpageable_test: OK\n");
    return 0;
}

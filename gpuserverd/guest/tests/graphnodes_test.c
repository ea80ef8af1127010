/* Conditional nodes (IF/ELSE, WHILE, SWITCH; built by hand, by cuGraphAddNode and by capture into
 * a graph), graph memory allocation and free nodes (usable memory, the graph memory attributes and
 * trim, the session's quota) and their refusals, through the guest library against a gpuserverd
 * on the simulated backend. argv[1] is the session's quota in MiB (the quota checks need 64).
 *
 * On a GPU, GPUCLOUD_GRAPHNODES_IMAGE names a cubin of gputests/graphnodes.cu (the same kernels:
 * cudaGraphSetConditional for real) and GPUCLOUD_GRAPHNODES_REAL=1 skips what only the simulator
 * promises (its exact codes for refusals NVIDIA leaves open). */
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MIB (1ull << 20)

static const char image[] = "GPUSIM-MODULE 1\n"
                            "kernel fill_u32\nkernel vector_add_f32\nkernel cond_set\nkernel cond_countdown\n";
static CUfunction fill, add, cond_set, countdown;
static size_t quota;
static int real;

static CUDA_KERNEL_NODE_PARAMS kernel1(CUfunction f, void **args) {
    return (CUDA_KERNEL_NODE_PARAMS){.func = f, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                                     .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
}

/* A kernel node through cuGraphAddNode. */
static CUgraphNode kernel_node(CUgraph g, const CUgraphNode *deps, size_t n, CUfunction f, void **args) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel = kernel1(f, args);
    CUgraphNode node;
    CHECK(cuGraphAddNode(&node, g, deps, NULL, n, &p));
    return node;
}

static CUgraphNode conditional(CUgraph g, const CUgraphNode *deps, size_t n, CUgraphConditionalHandle h,
                               CUgraphConditionalNodeType type, unsigned size, CUgraph **bodies) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h, p.conditional.type = type, p.conditional.size = size;
    CUgraphNode node;
    CHECK(cuGraphAddNode(&node, g, deps, NULL, n, &p));
    EXPECT(p.conditional.phGraph_out != NULL);
    *bodies = p.conditional.phGraph_out;
    return node;
}

static unsigned get_u32(CUdeviceptr p) {
    unsigned v;
    CHECK(cuMemcpyDtoH(&v, p, 4));
    return v;
}

static void put_u32(CUdeviceptr p, unsigned v) { CHECK(cuMemcpyHtoD(p, &v, 4)); }

static float get_f32(CUdeviceptr p) {
    float v;
    CHECK(cuMemcpyDtoH(&v, p, 4));
    return v;
}

/* A -> IF [fill 111 | fill 222]: the kernel sets the handle from *flag. */
static void if_else(CUstream s, CUdeviceptr flag, CUdeviceptr out) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 0));
    void *a_args[] = {&h, &flag};
    CUgraphNode a = kernel_node(g, NULL, 0, cond_set, a_args);
    CUgraph *bodies;
    CUgraphNode c = conditional(g, &a, 1, h, CU_GRAPH_COND_TYPE_IF, 2, &bodies);
    unsigned yes = 111, no = 222;
    int one = 1;
    void *yes_args[] = {&out, &yes, &one}, *no_args[] = {&out, &no, &one};
    kernel_node(bodies[0], NULL, 0, fill, yes_args);
    kernel_node(bodies[1], NULL, 0, fill, no_args);
    /* The body belongs to its node. */
    if (!real) EXPECT_RC(cuGraphDestroy(bodies[0]), CUDA_ERROR_INVALID_VALUE);
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    EXPECT(count == 2);
    CUgraphNode nodes[2];
    CUgraphNodeType types[2] = {0};
    (void)types;
    count = 2;
    CHECK(cuGraphGetNodes(g, nodes, &count));
    EXPECT(nodes[1] == c);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (unsigned f = 0; f < 2; f++) {
        put_u32(flag, f);
        put_u32(out, 0);
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        EXPECT(get_u32(out) == (f ? 111u : 222u));
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    printf("if/else ok\n");
}

/* IF with one body; SWITCH over three bodies (a value past them runs none). */
static void if_and_switch(CUstream s, CUdeviceptr flag, CUdeviceptr out) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 0));
    void *a_args[] = {&h, &flag};
    CUgraphNode a = kernel_node(g, NULL, 0, cond_set, a_args);
    CUgraph *bodies;
    conditional(g, &a, 1, h, CU_GRAPH_COND_TYPE_SWITCH, 3, &bodies);
    unsigned vals[3] = {10, 20, 30};
    int one = 1;
    void *args[3][3];
    for (int i = 0; i < 3; i++) {
        args[i][0] = &out, args[i][1] = &vals[i], args[i][2] = &one;
        kernel_node(bodies[i], NULL, 0, fill, args[i]);
    }
    {   /* A copy from the program's pageable memory in a body is refused: its bounce buffer would
         * never be refreshed (only the parent is launched). */
        static unsigned host_word = 5;
        CUDA_MEMCPY3D c;
        memset(&c, 0, sizeof c);
        c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = &host_word;
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = out;
        c.WidthInBytes = 4, c.Height = 1, c.Depth = 1;
        CUgraphNode cn;
        EXPECT_RC(cuGraphAddMemcpyNode(&cn, bodies[2], NULL, 0, &c, NULL), CUDA_ERROR_NOT_SUPPORTED);
    }
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (unsigned v = 0; v < 5; v++) {
        put_u32(flag, v);
        put_u32(out, 7);
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        EXPECT(get_u32(out) == (v < 3 ? vals[v] : 7u));
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* Bad parameters: body counts a type does not take, a handle of another graph, flags. */
    CUgraph g2, other;
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphCreate(&other, 0));
    CUgraphConditionalHandle ho;
    CHECK(cuGraphConditionalHandleCreate(&ho, other, NULL, 0, 0));
    EXPECT_RC(cuGraphConditionalHandleCreate(&ho, g2, NULL, 0, 2), CUDA_ERROR_INVALID_VALUE);
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = ho, p.conditional.type = CU_GRAPH_COND_TYPE_IF, p.conditional.size = 1;
    CUgraphNode n;
    if (!real) EXPECT_RC(cuGraphAddNode(&n, g2, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE); /* not g2's handle */
    CUgraphConditionalHandle h2;
    CHECK(cuGraphConditionalHandleCreate(&h2, g2, NULL, 0, 0));
    p.conditional.handle = h2, p.conditional.size = 3;
    EXPECT_RC(cuGraphAddNode(&n, g2, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE); /* IF takes 1 or 2 */
    p.conditional.type = CU_GRAPH_COND_TYPE_WHILE, p.conditional.size = 2;
    EXPECT_RC(cuGraphAddNode(&n, g2, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE); /* WHILE takes 1 */
    p.conditional.type = (CUgraphConditionalNodeType)7, p.conditional.size = 1;
    EXPECT_RC(cuGraphAddNode(&n, g2, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
    CUgraphEdgeData port = {.from_port = 1};
    CUgraphNode dep = kernel_node(g2, NULL, 0, fill, (void *[]){&out, &vals[0], &one});
    p.conditional.type = CU_GRAPH_COND_TYPE_IF;
    EXPECT_RC(cuGraphAddNode(&n, g2, &dep, &port, 1, &p), CUDA_ERROR_NOT_SUPPORTED); /* programmatic edges */
    CHECK(cuGraphDestroy(g2));
    CHECK(cuGraphDestroy(other));
    printf("if and switch ok\n");
}

/* A WHILE node whose handle defaults to 1 at each launch (a do-while), its body captured into it:
 * count down *counter, add 1 to *acc; it runs *counter times. */
static void do_while(CUstream s, CUdeviceptr counter, CUdeviceptr acc, CUdeviceptr one) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, NULL, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraph *bodies;
    conditional(g, NULL, 0, h, CU_GRAPH_COND_TYPE_WHILE, 1, &bodies);
    CUstream cs;
    CHECK(cuStreamCreate(&cs, 0));
    CHECK(cuStreamBeginCaptureToGraph(cs, bodies[0], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    CUgraph into;
    CHECK(cuStreamGetCaptureInfo(cs, &st, NULL, &into, NULL, NULL, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && into == bodies[0]);
    void *cd_args[] = {&counter, &h};
    int n1 = 1;
    void *add_args[] = {&acc, &one, &acc, &n1};
    CHECK(cuLaunchKernel(countdown, 1, 1, 1, 1, 1, 1, 0, cs, cd_args, NULL));
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, cs, add_args, NULL));
    CHECK(cuStreamEndCapture(cs, NULL)); /* a capture into a graph needs no graph out */
    size_t count = 0;
    CHECK(cuGraphGetNodes(bodies[0], NULL, &count));
    EXPECT(count == 2);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    put_u32(counter, 5);
    float zero = 0;
    CHECK(cuMemcpyHtoD(acc, &zero, 4));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(get_u32(counter) == 0 && get_f32(acc) == 5.0f);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy(cs));
    printf("do-while ok\n");
}

/* graphConditionalNodes' capturedWhileGraph: A -> WHILE [C] -> D, with the WHILE node added to a
 * capture in progress (cuStreamGetCaptureInfo's graph and dependencies, then
 * cuStreamUpdateCaptureDependencies) and its body captured into it. */
static void captured_while(CUstream s, CUdeviceptr counter, CUdeviceptr acc, CUdeviceptr one, CUdeviceptr out) {
    CUstream cs;
    CHECK(cuStreamCreate(&cs, 0));
    CHECK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    CUgraph g;
    const CUgraphNode *deps;
    size_t ndeps;
    CHECK(cuStreamGetCaptureInfo(cs, &st, NULL, &g, &deps, NULL, &ndeps));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && g != NULL && ndeps == 0);
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 0));
    void *cd_args[] = {&counter, &h};
    CHECK(cuLaunchKernel(countdown, 1, 1, 1, 1, 1, 1, 0, cs, cd_args, NULL)); /* A */
    CHECK(cuStreamGetCaptureInfo(cs, &st, NULL, &g, &deps, NULL, &ndeps));
    EXPECT(ndeps == 1);
    CUgraph *bodies;
    CUgraphNode c = conditional(g, deps, ndeps, h, CU_GRAPH_COND_TYPE_WHILE, 1, &bodies);
    EXPECT_RC(cuStreamUpdateCaptureDependencies(cs, &c, NULL, 1, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamUpdateCaptureDependencies(cs, &c, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuStreamGetCaptureInfo(cs, &st, NULL, NULL, &deps, NULL, &ndeps));
    EXPECT(ndeps == 1 && deps[0] == c);
    unsigned done = 99;
    int n1 = 1;
    void *d_args[] = {&out, &done, &n1};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, cs, d_args, NULL)); /* D */
    CUgraph captured;
    CHECK(cuStreamEndCapture(cs, &captured));
    EXPECT(captured == g);
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    EXPECT(count == 3);
    CHECK(cuStreamBeginCaptureToGraph(cs, bodies[0], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *add_args[] = {&acc, &one, &acc, &n1};
    CHECK(cuLaunchKernel(countdown, 1, 1, 1, 1, 1, 1, 0, cs, cd_args, NULL)); /* C */
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, cs, add_args, NULL));
    CHECK(cuStreamEndCapture(cs, NULL));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    unsigned starts[2] = {0, 4}, runs[2] = {0, 3}; /* A takes one off before the loop tests */
    for (int i = 0; i < 2; i++) {
        put_u32(counter, starts[i]);
        put_u32(out, 0);
        float zero = 0;
        CHECK(cuMemcpyHtoD(acc, &zero, 4));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        EXPECT(get_f32(acc) == (float)runs[i] && get_u32(out) == 99 && get_u32(counter) == 0);
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy(cs));
    printf("captured while ok\n");
}

static uint64_t graph_mem(CUgraphMem_attribute a) {
    cuuint64_t v = 0;
    CHECK(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes) {
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

/* A graph that allocates, fills, copies out and frees; a graph whose allocation outlives it. */
static void memory_nodes(CUstream s, CUdeviceptr out) {
    enum { N = 1024 };
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(N * 4);
    CUgraphNode an, fn, cn, frn;
    CHECK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
    CUdeviceptr p = ap.dptr;
    EXPECT(p != 0);
    unsigned v = 0x5a5a;
    int n = N;
    void *args[] = {&p, &v, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel1(fill, args);
    kp.gridDimX = N / 256, kp.blockDimX = 256;
    CHECK(cuGraphAddKernelNode(&fn, g, &an, 1, &kp));
    CUDA_MEMCPY3D cp = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = p, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = out, .WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    CHECK(cuGraphAddMemcpyNode(&cn, g, &fn, 1, &cp, NULL));
    CHECK(cuGraphAddMemFreeNode(&frn, g, &cn, 1, p));
    CUgraphNodeType types[4];
    CUgraphNode nodes[4];
    size_t count = 4;
    CHECK(cuGraphGetNodes(g, nodes, &count));
    EXPECT(count == 4);
    (void)types;
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    if (!real) EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0); /* nothing until a launch */
    for (int round = 0; round < 2; round++) {
        CHECK(cuMemsetD32(out, 0, N));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        unsigned got[N];
        CHECK(cuMemcpyDtoH(got, out, sizeof got));
        EXPECT(got[0] == 0x5a5a && got[N - 1] == 0x5a5a);
    }
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0); /* freed inside the graph */
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) >= N * 4);
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= N * 4);
    cuuint64_t zero = 0, seven = 7;
    CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 0);
    EXPECT_RC(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &seven), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuDeviceGraphMemTrim(0));
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* Unfreed: the allocation is the program's after the launch, until cuMemFree. */
    CUgraph u;
    CHECK(cuGraphCreate(&u, 0));
    ap = alloc_params(N * 4);
    CHECK(cuGraphAddMemAllocNode(&an, u, NULL, 0, &ap));
    p = ap.dptr;
    CHECK(cuGraphInstantiate(&x, u, 0));
    CHECK(cuGraphDestroy(u));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    unsigned data[N], back[N];
    for (int i = 0; i < N; i++) data[i] = 3 * i + 1;
    CHECK(cuMemcpyHtoD(p, data, sizeof data));
    CHECK(cuMemcpyDtoH(back, p, sizeof back));
    EXPECT(memcmp(data, back, sizeof data) == 0);
    /* Graph memory is device memory to the pointer queries: the direction of a unified copy. */
    CUdeviceptr base;
    size_t size;
    CHECK(cuMemGetAddressRange(&base, &size, p + 8));
    EXPECT(base == p && size == N * 4);
    memset(back, 0, sizeof back);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)back, p, sizeof back));
    EXPECT(memcmp(data, back, sizeof data) == 0);
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == N * 4);
    CHECK(cuMemFree(p));
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(cuGraphLaunch(x, s)); /* freed: it may run again */
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFreeAsync(p, s)); /* and be freed in stream order */
    CHECK(cuStreamSynchronize(s));
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(cuGraphExecDestroy(x));

    /* Refusals: no bytes, another device, IPC handle types, a free of what no node allocated. */
    CHECK(cuGraphCreate(&g, 0));
    ap = alloc_params(0);
    EXPECT_RC(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE);
    ap = alloc_params(64);
    ap.poolProps.location.id = 3;
    EXPECT_RC(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE);
    ap = alloc_params(64);
    ap.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT_RC(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE);
    if (!real) EXPECT_RC(cuGraphAddMemFreeNode(&frn, g, NULL, 0, out), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphDestroy(g));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("memory nodes ok\n");
}

/* Captured stream-ordered allocation becomes allocation and free nodes. */
static void captured_alloc(CUstream s) {
    CUstream cs;
    CHECK(cuStreamCreate(&cs, 0));
    CHECK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 4096, cs));
    CHECK(cuMemsetD32Async(p, 0x77, 1024, cs));
    CHECK(cuMemFreeAsync(p, cs));
    CUgraph g;
    CHECK(cuStreamEndCapture(cs, &g));
    CUgraphNode nodes[3];
    size_t count = 3;
    CHECK(cuGraphGetNodes(g, nodes, &count));
    EXPECT(count == 3);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    EXPECT(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) >= 4096);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy(cs));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("captured allocation ok\n");
}

/* The quota (64 MiB): a graph's allocations count from instantiation; a destroyed executable
 * graph's until a trim; an allocation that outlives its graph until it is freed. */
static void quota_checks(CUstream s) {
    if (quota != 64 * MIB) return;
    CUgraph g;
    CUgraphNode an;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(40 * MIB);
    CHECK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
    CUdeviceptr p = ap.dptr;
    CUgraphExec x, y;
    CHECK(cuGraphInstantiate(&x, g, 0));
    EXPECT_RC(cuGraphInstantiate(&y, g, 0), CUDA_ERROR_OUT_OF_MEMORY); /* two launches could hold 80 */
    CUdeviceptr d;
    EXPECT_RC(cuMemAlloc(&d, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphExecDestroy(x));
    EXPECT_RC(cuMemAlloc(&d, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY); /* until a trim shows it gone */
    CHECK(cuDeviceGraphMemTrim(0));
    EXPECT_RC(cuMemAlloc(&d, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY); /* not freed: still held */
    CHECK(cuMemFree(p));
    EXPECT_RC(cuMemAlloc(&d, 32 * MIB), CUDA_ERROR_OUT_OF_MEMORY); /* back in the graphs' pool */
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuMemAlloc(&d, 32 * MIB));
    EXPECT_RC(cuGraphInstantiate(&y, g, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree(d));
    CHECK(cuGraphInstantiate(&y, g, 0));
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphDestroy(g));
    CHECK(cuDeviceGraphMemTrim(0));

    /* A captured stream-ordered allocation is charged with its graph, not at capture. */
    CUstream cs;
    CHECK(cuStreamCreate(&cs, 0));
    CHECK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemAllocAsync(&p, 40 * MIB, cs));
    CHECK(cuMemFreeAsync(p, cs));
    CHECK(cuStreamEndCapture(cs, &g));
    CHECK(cuMemAlloc(&d, 32 * MIB));
    EXPECT_RC(cuGraphInstantiate(&x, g, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree(d));
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy(cs));
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuMemAlloc(&d, 60 * MIB)); /* everything given back */
    CHECK(cuMemFree(d));
    printf("graph memory quota ok\n");
}

static CUfunction function(CUmodule m, const char *name) {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, name));
    return f;
}

int main(int argc, char **argv) {
    quota = (argc > 1 ? (size_t)atoi(argv[1]) : 0) * MIB;
    real = getenv("GPUCLOUD_GRAPHNODES_REAL") != NULL;
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    const char *path = getenv("GPUCLOUD_GRAPHNODES_IMAGE");
    if (path) {
        static char buf[1 << 20];
        FILE *f = fopen(path, "rb");
        EXPECT(f != NULL);
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        EXPECT(n > 0 && n < sizeof buf);
        CHECK(cuModuleLoadData(&mod, buf));
    } else {
        CHECK(cuModuleLoadData(&mod, image));
    }
    fill = function(mod, "fill_u32"), add = function(mod, "vector_add_f32");
    cond_set = function(mod, "cond_set"), countdown = function(mod, "cond_countdown");
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CUdeviceptr flag, out, counter, acc, one, big;
    CHECK(cuMemAlloc(&flag, 4));
    CHECK(cuMemAlloc(&out, 4));
    CHECK(cuMemAlloc(&counter, 4));
    CHECK(cuMemAlloc(&acc, 4));
    CHECK(cuMemAlloc(&one, 4));
    CHECK(cuMemAlloc(&big, 4096));
    float f1 = 1;
    CHECK(cuMemcpyHtoD(one, &f1, 4));
    if_else(s, flag, out);
    if_and_switch(s, flag, out);
    do_while(s, counter, acc, one);
    captured_while(s, counter, acc, one, out);
    memory_nodes(s, big);
    captured_alloc(s);
    CUdeviceptr ps[] = {flag, out, counter, acc, one, big};
    for (int i = 0; i < 6; i++) CHECK(cuMemFree(ps[i]));
    quota_checks(s);
    CHECK(cuStreamDestroy(s));
    printf("graphnodes_test: OK\n");
    return 0;
}

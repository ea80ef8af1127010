/* Host nodes (by hand, through cuGraphAddNode and captured from cuLaunchHostFunc), graph clones and
 * changes to an executable graph's nodes, through the guest library against a gpuserverd on the
 * simulated backend. A host node runs in this process between the GPU work before it and after
 * it: it sees what a kernel wrote (copied to pageable memory by a memcpy node before it), and what
 * it writes reaches the device through a memcpy node after it. Prints "graphstage_test: OK". */
#include "check.h"

#include <stdint.h>

enum { N = 1024 };

/* What a host node saw and did. */
struct hostarg {
    unsigned *out;  /* a kernel's result, copied here before the host node */
    unsigned *next; /* written here: copied to the device after the host node */
    unsigned first, last;
    int calls, other_calls;
};

/* Reads the kernel's result, writes it plus one for the device, resets the input (as NVIDIA's
 * simpleCudaGraphs resets its result): a later launch must copy it again. */
static void host_fn(void *p) {
    struct hostarg *a = p;
    a->first = a->out[0], a->last = a->out[N - 1];
    for (int i = 0; i < N; i++) a->next[i] = a->out[i] + 1, a->out[i] = 0;
    a->calls++;
}

static void other_fn(void *p) { ((struct hostarg *)p)->other_calls++; }

static CUfunction fill;
static unsigned n = N;

static CUDA_KERNEL_NODE_PARAMS fill_params(void **args) {
    return (CUDA_KERNEL_NODE_PARAMS){.func = fill, .gridDimX = N / 256, .gridDimY = 1, .gridDimZ = 1,
                                     .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
}

static CUDA_MEMCPY3D copy_params(CUdeviceptr dsrc, const void *hsrc, CUdeviceptr ddst, void *hdst) {
    CUDA_MEMCPY3D c = {.WidthInBytes = N * 4, .Height = 1, .Depth = 1};
    if (hsrc) c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = hsrc;
    else c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = dsrc;
    if (hdst) c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = hdst;
    else c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = ddst;
    return c;
}

struct nodes {
    CUgraphNode k1, down, host, up, memset;
};

/* k1: fill d with *v -> down: d to a->out -> host -> up: a->next to d2; memset: d3 to 7, alone. */
static CUgraph host_graph(CUdeviceptr d, CUdeviceptr d2, CUdeviceptr d3, unsigned *v, struct hostarg *a,
                          struct nodes *nd) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    void *args[] = {&d, v, &n};
    CUDA_KERNEL_NODE_PARAMS k = fill_params(args);
    CHECK(cuGraphAddKernelNode(&nd->k1, g, NULL, 0, &k));
    CUDA_MEMCPY3D down = copy_params(d, NULL, 0, a->out), up = copy_params(0, a->next, d2, NULL);
    CHECK(cuGraphAddMemcpyNode(&nd->down, g, &nd->k1, 1, &down, NULL));
    CUDA_HOST_NODE_PARAMS h = {.fn = host_fn, .userData = a};
    CHECK(cuGraphAddHostNode(&nd->host, g, &nd->down, 1, &h));
    CHECK(cuGraphAddMemcpyNode(&nd->up, g, &nd->host, 1, &up, NULL));
    CUDA_MEMSET_NODE_PARAMS m = {.dst = d3, .value = 7, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphAddMemsetNode(&nd->memset, g, NULL, 0, &m, NULL));
    return g;
}

static void expect_all(CUdeviceptr d, unsigned want) {
    static unsigned buf[N];
    CHECK(cuMemcpyDtoH(buf, d, N * 4));
    for (int i = 0; i < N; i++)
        if (buf[i] != want) {
            fprintf(stderr, "element %d is %u, want %u\n", i, buf[i], want);
            exit(1);
        }
}

/* Launches x on s and checks the host node saw want and the device got want+1. */
static void launch_and_check(CUgraphExec x, CUstream s, struct hostarg *a, CUdeviceptr d2, unsigned want) {
    int calls = a->calls;
    CHECK(cuMemsetD32(d2, 0, N));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(a->calls == calls + 1);
    EXPECT(a->first == want && a->last == want);
    expect_all(d2, want + 1);
}

int main(void) {
    fill = sim_kernel("fill_u32", NULL);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d, d2, d3;
    CHECK(cuMemAlloc(&d, N * 4));
    CHECK(cuMemAlloc(&d2, N * 4));
    CHECK(cuMemAlloc(&d3, N * 4));
    struct hostarg a = {.out = malloc(N * 4), .next = malloc(N * 4)};
    EXPECT(a.out && a.next);

    /* A host node between GPU work, by hand. */
    unsigned v = 41;
    struct nodes nd;
    CUgraph g = host_graph(d, d2, d3, &v, &a, &nd);
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    EXPECT(count == 5);
    CUDA_HOST_NODE_PARAMS got;
    CHECK(cuGraphHostNodeGetParams(nd.host, &got));
    EXPECT(got.fn == host_fn && got.userData == &a);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 3; round++) launch_and_check(x, s, &a, d2, 41);
    expect_all(d3, 7);
    printf("host node ok\n");

    /* A clone launches alone (the original graph destroyed) and gives the same result. */
    CUgraph cl;
    CHECK(cuGraphClone(&cl, g));
    CUgraphNode k1c;
    CHECK(cuGraphNodeFindInClone(&k1c, nd.k1, cl));
    EXPECT(k1c != NULL && k1c != nd.k1);
    CHECK(cuGraphDestroy(g));
    CUgraphExec xc;
    CHECK(cuGraphInstantiate(&xc, cl, 0));
    launch_and_check(xc, s, &a, d2, 41);
    printf("clone ok\n");

    /* The executable graph's kernel node takes new arguments; the clone's does not change. */
    unsigned w = 1234;
    void *wargs[] = {&d, &w, &n};
    CUDA_KERNEL_NODE_PARAMS k = fill_params(wargs);
    CHECK(cuGraphExecKernelNodeSetParams(x, nd.k1, &k));
    w = 5; /* the node took the value at the call */
    launch_and_check(x, s, &a, d2, 1234);
    launch_and_check(xc, s, &a, d2, 41);
    /* and its host node another function */
    CUDA_HOST_NODE_PARAMS other = {.fn = other_fn, .userData = &a};
    CHECK(cuGraphExecHostNodeSetParams(x, nd.host, &other));
    int calls = a.calls;
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(a.calls == calls && a.other_calls == 1);
    CUDA_MEMSET_NODE_PARAMS m9 = {.dst = d3, .value = 9, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphExecMemsetNodeSetParams(x, nd.memset, &m9, NULL));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d3, 9);
    EXPECT_RC(cuGraphExecHostNodeSetParams(x, nd.k1, &other), CUDA_ERROR_INVALID_VALUE); /* no host node */
    printf("exec node params ok\n");

    /* An update from a graph of the same shape: its kernel's value and host function. */
    unsigned v3 = 300;
    struct nodes nd3;
    CUgraph g3 = host_graph(d, d2, d3, &v3, &a, &nd3);
    CUgraphExecUpdateResultInfo info;
    CHECK(cuGraphExecUpdate(x, g3, &info));
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    launch_and_check(x, s, &a, d2, 300);
    /* not from one without the host node */
    CUgraph plain;
    CHECK(cuGraphCreate(&plain, 0));
    void *pargs[] = {&d, &v3, &n};
    CUDA_KERNEL_NODE_PARAMS pk = fill_params(pargs);
    CUgraphNode pn;
    CHECK(cuGraphAddKernelNode(&pn, plain, NULL, 0, &pk));
    EXPECT_RC(cuGraphExecUpdate(x, plain, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS);
    launch_and_check(x, s, &a, d2, 300); /* still works */
    printf("exec update ok\n");

    /* A graph without host nodes: its kernel, memset and copy nodes take new parameters. */
    CUgraphNode pm, pc;
    CUDA_MEMSET_NODE_PARAMS m1 = {.dst = d3, .value = 1, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphAddMemsetNode(&pm, plain, &pn, 1, &m1, NULL));
    CUDA_MEMCPY3D dd = copy_params(d, NULL, d2, NULL);
    CHECK(cuGraphAddMemcpyNode(&pc, plain, &pm, 1, &dd, NULL));
    CUgraphExec px;
    CHECK(cuGraphInstantiate(&px, plain, 0));
    CHECK(cuGraphLaunch(px, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d2, 300);
    expect_all(d3, 1);
    unsigned u = 77;
    void *uargs[] = {&d, &u, &n};
    CUDA_KERNEL_NODE_PARAMS uk = fill_params(uargs);
    CHECK(cuGraphExecKernelNodeSetParams(px, pn, &uk));
    CUDA_MEMSET_NODE_PARAMS m2 = {.dst = d3, .value = 2, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphExecMemsetNodeSetParams(px, pm, &m2, NULL));
    CUDA_MEMCPY3D dd3 = copy_params(d, NULL, d3, NULL); /* now into d3, after the memset */
    CHECK(cuGraphExecMemcpyNodeSetParams(px, pc, &dd3, NULL));
    CHECK(cuMemsetD32(d2, 0, N));
    CHECK(cuGraphLaunch(px, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d2, 0);
    expect_all(d3, 77);
    EXPECT_RC(cuGraphExecKernelNodeSetParams(px, pm, &uk), CUDA_ERROR_INVALID_VALUE); /* a memset node */
    printf("plain exec params ok\n");

    /* Captured: a launch, a copy to pageable memory, cuLaunchHostFunc, a copy from it. */
    unsigned v4 = 4444;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *cargs[] = {&d, &v4, &n};
    CHECK(cuLaunchKernel(fill, N / 256, 1, 1, 256, 1, 1, 0, s, cargs, NULL));
    CHECK(cuMemcpyDtoHAsync(a.out, d, N * 4, s));
    CHECK(cuLaunchHostFunc(s, host_fn, &a));
    CHECK(cuMemcpyHtoDAsync(d2, a.next, N * 4, s));
    CUgraph cg;
    calls = a.calls;
    CHECK(cuStreamEndCapture(s, &cg));
    EXPECT(a.calls == calls); /* captured, not run */
    CUgraphNode cnodes[8];
    count = 8;
    CHECK(cuGraphGetNodes(cg, cnodes, &count));
    EXPECT(count == 4);
    int hosts = 0;
    for (size_t i = 0; i < count; i++)
        if (cuGraphHostNodeGetParams(cnodes[i], &got) == CUDA_SUCCESS && got.fn == host_fn) hosts++;
    EXPECT(hosts == 1);
    CUgraphExec cx;
    CHECK(cuGraphInstantiate(&cx, cg, 0));
    for (int round = 0; round < 2; round++) launch_and_check(cx, s, &a, d2, 4444);
    printf("captured host function ok\n");

    /* Outside a capture, cuLaunchHostFunc runs after the stream's work; refusals. */
    CHECK(cuLaunchKernel(fill, N / 256, 1, 1, 256, 1, 1, 0, s, cargs, NULL));
    calls = a.other_calls;
    CHECK(cuLaunchHostFunc(s, other_fn, &a));
    EXPECT(a.other_calls == calls + 1);
    EXPECT_RC(cuLaunchHostFunc(s, NULL, &a), CUDA_ERROR_INVALID_VALUE);
    CUDA_HOST_NODE_PARAMS none = {0};
    CUgraphNode hn;
    EXPECT_RC(cuGraphAddHostNode(&hn, cg, NULL, 0, &none), CUDA_ERROR_INVALID_VALUE);
    printf("host function ok\n");

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(xc));
    CHECK(cuGraphExecDestroy(px));
    CHECK(cuGraphExecDestroy(cx));
    CHECK(cuGraphDestroy(cl));
    CHECK(cuGraphDestroy(g3));
    CHECK(cuGraphDestroy(plain));
    CHECK(cuGraphDestroy(cg));
    printf("graphstage_test: OK\n");
    return 0;
}

/* The runtime's host nodes, clones and executable-graph node updates on the simulated backend, as
 * NVIDIA's simpleCudaGraphs and jacobiCudaGraphs use them: a kernel's result copied to a pageable
 * local by a memcpy node, read (and reset) by a host node after it; a clone of the graph launched
 * on its own; the kernel node of an executable graph given new arguments; cudaLaunchHostFunc
 * captured into a graph. */
#include "rt_sim.h"

#include "../tests/check.h"

#include <stdint.h>
#include <string.h>

cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaGraphCreate(cudaGraph_t *, unsigned);
cudaError_t cudaGraphDestroy(cudaGraph_t);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t *, size_t *);
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                   const struct cudaKernelNodeParams *);
cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                   const struct cudaMemcpy3DParms *);
cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                 const struct cudaHostNodeParams *);
cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t, struct cudaHostNodeParams *);
cudaError_t cudaGraphClone(cudaGraph_t *, cudaGraph_t);
cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *, cudaGraphNode_t, cudaGraph_t);
cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t, cudaGraphNode_t, const struct cudaKernelNodeParams *);
cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t, cudaGraphNode_t, const struct cudaHostNodeParams *);
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t, void *);

enum { N = 1024 };

/* What the host node saw: the kernel's first value, copied to *result before it. */
struct seen {
    unsigned *result;
    unsigned value;
    int calls;
};

static void host_fn(void *p) {
    struct seen *s = p;
    s->value = *s->result, s->calls++;
    *s->result = 0; /* as simpleCudaGraphs resets it: the next launch copies it again */
}

static void expect_run(cudaGraphExec_t x, cudaStream_t s, struct seen *seen, unsigned want) {
    int calls = seen->calls;
    RT(cudaGraphLaunch(x, s));
    RT(cudaStreamSynchronize(s));
    EXPECT(seen->calls == calls + 1 && seen->value == want);
}

void graph_hosts(void) {
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    unsigned *d;
    RT(cudaMalloc((void **)&d, N * 4));
    unsigned result = 0; /* pageable: the program's stack */
    struct seen seen = {.result = &result};

    cudaGraph_t g;
    RT(cudaGraphCreate(&g, 0));
    int n = N;
    unsigned v = 31;
    void *args[] = {&d, &v, &n};
    struct cudaKernelNodeParams kp = {.func = (void *)fill_u32_stub, .gridDim = {N / 256, 1, 1},
                                      .blockDim = {256, 1, 1}, .kernelParams = args};
    cudaGraphNode_t kn, cn, hn;
    RT(cudaGraphAddKernelNode(&kn, g, NULL, 0, &kp));
    struct cudaMemcpy3DParms down = {.srcPtr = {d, 4, 1, 1}, .dstPtr = {&result, 4, 1, 1}, .extent = {4, 1, 1},
                                     .kind = cudaMemcpyDeviceToHost};
    RT(cudaGraphAddMemcpyNode(&cn, g, &kn, 1, &down));
    struct cudaHostNodeParams hp = {.fn = host_fn, .userData = &seen};
    RT(cudaGraphAddHostNode(&hn, g, &cn, 1, &hp));
    struct cudaHostNodeParams got;
    RT(cudaGraphHostNodeGetParams(hn, &got));
    EXPECT(got.fn == host_fn && got.userData == &seen);
    size_t count = 0;
    RT(cudaGraphGetNodes(g, NULL, &count));
    EXPECT(count == 3);
    cudaGraphExec_t x;
    RT(cudaGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 2; round++) expect_run(x, s, &seen, 31);

    cudaGraph_t cl;
    RT(cudaGraphClone(&cl, g));
    cudaGraphNode_t knc;
    RT(cudaGraphNodeFindInClone(&knc, kn, cl));
    EXPECT(knc != kn);
    cudaGraphExec_t xc;
    RT(cudaGraphInstantiate(&xc, cl, 0));
    expect_run(xc, s, &seen, 31);

    unsigned w = 97;
    void *wargs[] = {&d, &w, &n};
    kp.kernelParams = wargs;
    RT(cudaGraphExecKernelNodeSetParams(x, kn, &kp));
    expect_run(x, s, &seen, 97);
    expect_run(xc, s, &seen, 31); /* the clone keeps its own arguments */
    EXPECT(cudaGraphExecHostNodeSetParams(x, kn, &hp) == cudaErrorInvalidValue);

    /* Captured: a launch, a copy to the local, cudaLaunchHostFunc. */
    unsigned v2 = 55;
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EXPECT(__cudaPushCallConfiguration((dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(d, v2, N);
    RT(cudaMemcpyAsync(&result, d, 4, cudaMemcpyDeviceToHost, s));
    RT(cudaLaunchHostFunc(s, host_fn, &seen));
    cudaGraph_t cg;
    int calls = seen.calls;
    RT(cudaStreamEndCapture(s, &cg));
    EXPECT(seen.calls == calls);
    cudaGraphExec_t cx;
    RT(cudaGraphInstantiate(&cx, cg, 0));
    for (int round = 0; round < 2; round++) expect_run(cx, s, &seen, 55);

    RT(cudaGraphExecDestroy(x));
    RT(cudaGraphExecDestroy(xc));
    RT(cudaGraphExecDestroy(cx));
    RT(cudaGraphDestroy(g));
    RT(cudaGraphDestroy(cl));
    RT(cudaGraphDestroy(cg));
    RT(cudaFree(d));
    RT(cudaStreamDestroy(s));
    printf("rt graph host nodes ok\n");
}

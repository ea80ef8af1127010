/* The runtime's side of the hand-written families on the simulated backend: capture a memset and
 * a kernel, replay the graph twice; pools; cooperative and attributed launches; a 3-D round trip
 * through an array. */
#include "rt_sim.h"

#include "../tests/check.h"

#include <stdint.h>
#include <string.h>

cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaStreamIsCapturing(cudaStream_t, enum cudaStreamCaptureStatus *);
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);
cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                   const struct cudaMemcpy3DParms *);
cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t *, size_t *);
cudaError_t cudaGraphCreate(cudaGraph_t *, unsigned);
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                   const struct cudaKernelNodeParams *);
cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                   const struct cudaMemsetParams *);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *, int);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *, const struct cudaMemPoolProps *);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void *);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void *);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t cudaMalloc3DArray(cudaArray_t *, const struct cudaChannelFormatDesc *, struct cudaExtent, unsigned);
struct cudaChannelFormatDesc cudaCreateChannelDesc(int, int, int, int, enum cudaChannelFormatKind);
cudaError_t cudaMallocArray(cudaArray_t *, const struct cudaChannelFormatDesc *, size_t, size_t, unsigned);
cudaError_t cudaFreeArray(cudaArray_t);
cudaError_t cudaMemcpyToArray(cudaArray_t, size_t, size_t, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyFromArray(void *, cudaArray_const_t, size_t, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *, struct cudaExtent);
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *);
cudaError_t cudaMemcpy2DToArray(cudaArray_t, size_t, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaCreateTextureObject(cudaTextureObject_t *, const struct cudaResourceDesc *, const struct cudaTextureDesc *,
                                    const struct cudaResourceViewDesc *);
cudaError_t cudaDestroyTextureObject(cudaTextureObject_t);
cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *, cudaTextureObject_t);
cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *, const struct cudaResourceDesc *);
cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t);
cudaError_t cudaMemcpy2DFromArray(void *, size_t, cudaArray_const_t, size_t, size_t, size_t, size_t, enum cudaMemcpyKind);

static void graphs(void) {
    enum { N = 1024 };
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    unsigned *a, *b, h[N];
    RT(cudaMalloc((void **)&a, N * 4));
    RT(cudaMalloc((void **)&b, N * 4));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    RT(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusActive);
    RT(cudaMemsetAsync(a, 0x22, N * 4, s));
    EXPECT(__cudaPushCallConfiguration((dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(b, 6, N);
    /* PyTorch's caching allocator during torch.cuda.graph: cudaMalloc under a relaxed thread mode,
     * which a global capture allows (the simulated backend, like NVIDIA's driver, refuses an
     * allocation while a global-mode capture is under way for a thread not relaxed). */
    enum cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    RT(cudaThreadExchangeStreamCaptureMode(&relaxed));
    void *during;
    RT(cudaMalloc(&during, 4096));
    RT(cudaThreadExchangeStreamCaptureMode(&relaxed));
    EXPECT(relaxed == cudaStreamCaptureModeRelaxed);
    cudaGraph_t g;
    RT(cudaStreamEndCapture(s, &g));
    size_t count = 0;
    RT(cudaGraphGetNodes(g, NULL, &count));
    EXPECT(count == 2);
    cudaGraphExec_t x;
    RT(cudaGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 2; round++) {
        RT(cudaMemset(a, 0, N * 4));
        RT(cudaMemset(b, 0, N * 4));
        RT(cudaGraphLaunch(x, s));
        RT(cudaStreamSynchronize(s));
        RT(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == 0x22222222 && h[N - 1] == 0x22222222);
        RT(cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT(h[0] == 6 && h[N - 1] == 6);
    }
    /* Built by hand: a memset node, then a kernel node after it. */
    cudaGraph_t g2;
    RT(cudaGraphCreate(&g2, 0));
    struct cudaMemsetParams mp = {.dst = b, .value = 1, .elementSize = 4, .width = N, .height = 1};
    cudaGraphNode_t ms, kn;
    RT(cudaGraphAddMemsetNode(&ms, g2, NULL, 0, &mp));
    int n = N / 2;
    unsigned v = 8;
    void *args[] = {&a, &v, &n};
    struct cudaKernelNodeParams kp = {.func = (void *)fill_u32_stub, .gridDim = {N / 256, 1, 1},
                                      .blockDim = {256, 1, 1}, .kernelParams = args};
    RT(cudaGraphAddKernelNode(&kn, g2, &ms, 1, &kp));
    /* A copy node after the kernel, as simpleCudaGraphs builds one: a into b on the device. */
    struct cudaMemcpy3DParms cp = {.srcPtr = {a, N * 4, N, 1}, .dstPtr = {b, N * 4, N, 1}, .extent = {N * 4, 1, 1},
                                   .kind = cudaMemcpyDeviceToDevice};
    cudaGraphNode_t cn, dn;
    RT(cudaGraphAddMemcpyNode(&cn, g2, &kn, 1, &cp));
    /* Host memory lives in this VM: the node copies through a bounce buffer, emptied into h after
     * each launch (jacobiCudaGraphs reads its sum so). */
    struct cudaMemcpy3DParms down = {.srcPtr = {a, N * 4, N, 1}, .dstPtr = {h, N * 4, N, 1}, .extent = {N * 4, 1, 1},
                                     .kind = cudaMemcpyDeviceToHost};
    RT(cudaGraphAddMemcpyNode(&dn, g2, &cn, 1, &down));
    cudaGraphExec_t x2;
    RT(cudaGraphInstantiate(&x2, g2, 0));
    memset(h, 0, sizeof h);
    RT(cudaGraphLaunch(x2, s));
    RT(cudaStreamSynchronize(s));
    EXPECT(h[0] == 8 && h[N / 2 - 1] == 8 && h[N / 2] == 0x22222222); /* by the graph's own copy */
    memset(h, 0, sizeof h);
    RT(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 8 && h[N / 2 - 1] == 8 && h[N / 2] == 0x22222222);
    unsigned hb[N];
    RT(cudaMemcpy(hb, b, sizeof hb, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(h, hb, sizeof h) == 0); /* the copy node ran after the kernel, not the memset's 1s */
    /* As conjugateGradientCudaGraphs: a captured copy of one value into a local, read after each
     * launch on another stream and its synchronisation. */
    unsigned r1 = 0;
    cudaStream_t s2;
    RT(cudaStreamCreateWithFlags(&s2, 1));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RT(cudaMemsetAsync(b, 0, N * 4, s));
    RT(cudaMemcpyAsync(b, h, 4, cudaMemcpyHostToDevice, s));
    RT(cudaMemcpyAsync(&r1, b, 4, cudaMemcpyDeviceToHost, s));
    cudaGraph_t g3;
    RT(cudaStreamEndCapture(s, &g3));
    cudaGraphExec_t x3;
    RT(cudaGraphInstantiate(&x3, g3, 0));
    for (unsigned round = 1; round <= 2; round++) {
        h[0] = 500 + round;
        RT(cudaGraphLaunch(x3, s2));
        RT(cudaStreamSynchronize(s2));
        EXPECT(r1 == 500 + round);
    }
    RT(cudaGraphExecDestroy(x3));
    RT(cudaGraphDestroy(g3));
    RT(cudaStreamDestroy(s2));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RT(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    RT(cudaGraphExecDestroy(x));
    RT(cudaGraphExecDestroy(x2));
    RT(cudaGraphDestroy(g));
    RT(cudaGraphDestroy(g2));
    RT(cudaFree(a));
    RT(cudaFree(b));
    RT(cudaFree(during));
    RT(cudaStreamDestroy(s));
}

cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *, cudaGraph_t, unsigned, unsigned);
cudaError_t cudaGraphAddNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *, size_t,
                             struct cudaGraphNodeParams *);
cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t,
                                     struct cudaMemAllocNodeParams *);
cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *, cudaGraph_t, const cudaGraphNode_t *, size_t, void *);
cudaError_t cudaDeviceGraphMemTrim(int);
cudaError_t cudaDeviceGetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void *);
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *,
                                          size_t, enum cudaStreamCaptureMode);
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t, cudaGraphNode_t *, const cudaGraphEdgeData *, size_t,
                                                unsigned);

/* Conditional IF nodes on handles whose default applies at each launch (1 runs the body, 0 not),
 * the body captured into; an allocation node's memory filled by cudaGraphAddNode's kernel node. */
static void graph_nodes(void) {
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    unsigned *out, h;
    RT(cudaMalloc((void **)&out, 4));
    for (unsigned def = 0; def < 2; def++) {
        cudaGraph_t g;
        RT(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle c;
        RT(cudaGraphConditionalHandleCreate(&c, g, def, cudaGraphCondAssignDefault));
        struct cudaGraphNodeParams p;
        memset(&p, 0, sizeof p);
        p.type = cudaGraphNodeTypeConditional;
        p.conditional.handle = c, p.conditional.type = cudaGraphCondTypeIf, p.conditional.size = 1;
        cudaGraphNode_t cn;
        RT(cudaGraphAddNode(&cn, g, NULL, NULL, 0, &p));
        EXPECT(p.conditional.phGraph_out != NULL);
        RT(cudaStreamBeginCaptureToGraph(s, p.conditional.phGraph_out[0], NULL, NULL, 0, cudaStreamCaptureModeGlobal));
        EXPECT(__cudaPushCallConfiguration((dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, s) == 0);
        fill_u32_stub(out, 41, 1);
        RT(cudaStreamUpdateCaptureDependencies(s, NULL, NULL, 0, cudaStreamSetCaptureDependencies));
        RT(cudaStreamEndCapture(s, NULL));
        cudaGraphExec_t x;
        RT(cudaGraphInstantiate(&x, g, 0));
        RT(cudaMemset(out, 0, 4));
        RT(cudaGraphLaunch(x, s));
        RT(cudaStreamSynchronize(s));
        RT(cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost));
        EXPECT(h == (def ? 41u : 0u));
        RT(cudaGraphExecDestroy(x));
        RT(cudaGraphDestroy(g));
    }
    cudaGraph_t g;
    RT(cudaGraphCreate(&g, 0));
    struct cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.bytesize = 4096;
    cudaGraphNode_t an, kn, fn;
    RT(cudaGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
    EXPECT(ap.dptr != NULL);
    unsigned v = 5;
    int n = 1024;
    void *args[] = {&ap.dptr, &v, &n};
    struct cudaGraphNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.type = cudaGraphNodeTypeKernel;
    kp.kernel.func = (void *)fill_u32_stub, kp.kernel.gridDim = (dim3){4, 1, 1}, kp.kernel.blockDim = (dim3){256, 1, 1};
    kp.kernel.kernelParams = args;
    RT(cudaGraphAddNode(&kn, g, &an, NULL, 1, &kp));
    cudaGraphExec_t x;
    RT(cudaGraphInstantiate(&x, g, 0));
    RT(cudaGraphLaunch(x, s));
    RT(cudaStreamSynchronize(s));
    unsigned back[1024];
    RT(cudaMemcpy(back, ap.dptr, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back[0] == 5 && back[1023] == 5);
    unsigned long long used = 0;
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    EXPECT(used == 4096);
    RT(cudaFree(ap.dptr)); /* an allocation that outlives its graph, freed by cudaFree */
    RT(cudaDeviceGraphMemTrim(0));
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &used));
    EXPECT(used == 0);
    cudaGraph_t g2;
    RT(cudaGraphCreate(&g2, 0));
    EXPECT(cudaGraphAddMemFreeNode(&fn, g2, NULL, 0, out) == cudaErrorInvalidValue); /* no node allocated it */
    (void)cudaGetLastError();
    RT(cudaGraphExecDestroy(x));
    RT(cudaGraphDestroy(g));
    RT(cudaGraphDestroy(g2));
    RT(cudaFree(out));
    RT(cudaStreamDestroy(s));
}

static void pools(void) {
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    cudaMemPool_t def;
    RT(cudaDeviceGetDefaultMemPool(&def, 0));
    EXPECT(def != NULL);
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                                     .location = {.type = cudaMemLocationTypeDevice, .id = 0}};
    cudaMemPool_t pool;
    RT(cudaMemPoolCreate(&pool, &props));
    unsigned long long keep = ~0ull, got = 0;
    RT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    void *p;
    RT(cudaMallocFromPoolAsync(&p, 1 << 20, pool, s));
    RT(cudaFreeAsync(p, s));
    RT(cudaStreamSynchronize(s));
    RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &got));
    EXPECT(got >= 1 << 20);
    RT(cudaMemPoolTrimTo(pool, 0));
    RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &got));
    EXPECT(got == 0);
    RT(cudaMemPoolDestroy(pool));
    RT(cudaStreamDestroy(s));
}

static void launches(void) {
    unsigned *d, h[4];
    RT(cudaMalloc((void **)&d, 4096));
    unsigned v = 31;
    int n = 1024;
    void *args[] = {&d, &v, &n};
    RT(cudaLaunchCooperativeKernel((const void *)fill_u32_stub, (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, 0, NULL));
    RT(cudaMemcpy(h, d + 1020, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 31 && h[3] == 31);
    v = 32;
    cudaLaunchAttribute at = {.id = cudaLaunchAttributePriority, .val.priority = 0};
    cudaLaunchConfig_t cfg = {.gridDim = {4, 1, 1}, .blockDim = {256, 1, 1}, .attrs = &at, .numAttrs = 1};
    RT(cudaLaunchKernelExC(&cfg, (const void *)fill_u32_stub, args));
    RT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 32);
    /* As thrust's merge sort launches (programmatic dependent launch): a hint, the launch runs
     * ordered as any other. */
    v = 33;
    cudaLaunchAttribute pdl[2] = {{.id = cudaLaunchAttributeProgrammaticStreamSerialization,
                                   .val.programmaticStreamSerializationAllowed = 1},
                                  {.id = cudaLaunchAttributeAccessPolicyWindow}};
    cfg.attrs = pdl, cfg.numAttrs = 2;
    RT(cudaLaunchKernelExC(&cfg, (const void *)fill_u32_stub, args));
    RT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 33);
    RT(cudaFree(d));
}

static void arrays(void) {
    enum { W = 16, H = 5, D = 3 };
    struct cudaChannelFormatDesc f = {32, 0, 0, 0, cudaChannelFormatKindFloat};
    cudaArray_t arr;
    RT(cudaMalloc3DArray(&arr, &f, (struct cudaExtent){W, H, D}, 0));
    static float host[D][H][W], back[D][H][W];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) host[z][y][x] = z * 100 + y * 10 + x;
    struct cudaMemcpy3DParms up = {.srcPtr = {host, W * 4, W, H}, .dstArray = arr, .extent = {W, H, D},
                                   .kind = cudaMemcpyHostToDevice};
    RT(cudaMemcpy3D(&up));
    struct cudaPitchedPtr dev;
    RT(cudaMalloc3D(&dev, (struct cudaExtent){W * 4, H, D}));
    EXPECT(dev.pitch >= W * 4);
    struct cudaMemcpy3DParms mid = {.srcArray = arr, .dstPtr = dev, .extent = {W, H, D}, .kind = cudaMemcpyDeviceToDevice};
    RT(cudaMemcpy3D(&mid));
    struct cudaMemcpy3DParms down = {.srcPtr = dev, .dstPtr = {back, W * 4, W, H}, .extent = {W * 4, H, D},
                                     .kind = cudaMemcpyDeviceToHost};
    RT(cudaMemcpy3D(&down));
    EXPECT(memcmp(host, back, sizeof host) == 0);
    cudaArray_t flat;
    struct cudaChannelFormatDesc u8 = {8, 8, 8, 8, cudaChannelFormatKindUnsigned};
    RT(cudaMallocArray(&flat, &u8, 8, 2, 0));
    unsigned char rows[2][32], rows2[2][32];
    for (int i = 0; i < 64; i++) rows[i / 32][i % 32] = (unsigned char)(i + 3);
    RT(cudaMemcpy2DToArray(flat, 0, 0, rows, 32, 32, 2, cudaMemcpyHostToDevice));
    RT(cudaMemcpy2DFromArray(rows2, 32, flat, 0, 0, 32, 2, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(rows, rows2, sizeof rows) == 0);
    /* The deprecated linear forms, as simpleTexture uses them: all of it, then 40 bytes from byte 20
     * of row 0 (the rest of row 0 and 28 bytes of row 1). */
    unsigned char lin[64], lin2[64];
    for (int i = 0; i < 64; i++) lin[i] = (unsigned char)(200 - i);
    RT(cudaMemcpyToArray(flat, 0, 0, lin, 64, cudaMemcpyHostToDevice));
    RT(cudaMemcpy2DFromArray(rows2, 32, flat, 0, 0, 32, 2, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(lin, rows2, 64) == 0);
    memset(lin2, 0, sizeof lin2);
    RT(cudaMemcpyFromArray(lin2, flat, 20, 0, 40, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(lin2, lin + 20, 40) == 0 && lin2[40] == 0);
    EXPECT(cudaMemcpyToArray(flat, 32, 0, lin, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT(cudaFreeArray(flat));
    RT(cudaFreeArray(arr));
    RT(cudaFree(dev.ptr));
}

static void textures(void) {
    void *lin;
    RT(cudaMalloc(&lin, 4096));
    struct cudaResourceDesc r = {.resType = cudaResourceTypeLinear,
                                 .res.linear = {lin, {16, 16, 0, 0, cudaChannelFormatKindSigned}, 4096}};
    struct cudaTextureDesc t = {.addressMode = {cudaAddressModeClamp}, .readMode = cudaReadModeElementType};
    cudaTextureObject_t tex;
    RT(cudaCreateTextureObject(&tex, &r, &t, NULL));
    struct cudaResourceDesc back;
    RT(cudaGetTextureObjectResourceDesc(&back, tex));
    EXPECT(back.resType == cudaResourceTypeLinear && back.res.linear.devPtr == lin &&
           back.res.linear.sizeInBytes == 4096 && back.res.linear.desc.x == 16 && back.res.linear.desc.y == 16 &&
           back.res.linear.desc.z == 0 && back.res.linear.desc.f == cudaChannelFormatKindSigned);
    RT(cudaDestroyTextureObject(tex));
    cudaArray_t arr;
    /* As the texture samples build it (a struct returned by value, no error code). */
    struct cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    EXPECT(f.x == 32 && f.y == 0 && f.z == 0 && f.w == 0 && f.f == cudaChannelFormatKindFloat);
    struct cudaChannelFormatDesc rgba = cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
    EXPECT(rgba.x == 8 && rgba.y == 8 && rgba.z == 8 && rgba.w == 8 && rgba.f == cudaChannelFormatKindUnsigned);
    RT(cudaMallocArray(&arr, &f, 16, 16, 0x02)); /* cudaArraySurfaceLoadStore */
    struct cudaResourceDesc ra = {.resType = cudaResourceTypeArray, .res.array.array = arr};
    cudaSurfaceObject_t surf;
    RT(cudaCreateSurfaceObject(&surf, &ra));
    RT(cudaDestroySurfaceObject(surf));
    RT(cudaFreeArray(arr));
    RT(cudaFree(lin));
}

cudaError_t cudaStreamSetAttribute(cudaStream_t, cudaStreamAttrID, const cudaStreamAttrValue *);
cudaError_t cudaStreamGetAttribute(cudaStream_t, cudaStreamAttrID, cudaStreamAttrValue *);

/* The access-policy window as simpleAttributes sets it: kept as a hint and answered back per
 * stream; bad values refused; a new stream starts without one. */
static void stream_attributes(void) {
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 0));
    void *d;
    RT(cudaMalloc(&d, 1 << 20));
    cudaStreamAttrValue v, got;
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow = (struct cudaAccessPolicyWindow){d, 1 << 20, 0.6f, cudaAccessPropertyPersisting,
                                                           cudaAccessPropertyStreaming};
    RT(cudaStreamSetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &v));
    memset(&got, 0xff, sizeof got);
    RT(cudaStreamGetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &got));
    EXPECT(got.accessPolicyWindow.base_ptr == d && got.accessPolicyWindow.num_bytes == 1 << 20 &&
           got.accessPolicyWindow.hitRatio == 0.6f && got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
           got.accessPolicyWindow.missProp == cudaAccessPropertyStreaming);
    /* Another stream has none: the window is the stream's. */
    cudaStream_t other;
    RT(cudaStreamCreateWithFlags(&other, 0));
    RT(cudaStreamGetAttribute(other, cudaLaunchAttributeAccessPolicyWindow, &got));
    EXPECT(got.accessPolicyWindow.base_ptr == NULL && got.accessPolicyWindow.num_bytes == 0);
    v.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT(cudaStreamSetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &v) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT(cudaStreamGetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &got));
    EXPECT(got.accessPolicyWindow.hitRatio == 0.6f); /* the refused set left the window as it was */
    EXPECT(cudaStreamSetAttribute(s, cudaLaunchAttributeCooperative, &v) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    /* A stream's priority is its own, from the server. */
    RT(cudaStreamGetAttribute(s, cudaLaunchAttributePriority, &got));
    EXPECT(got.priority == 0);
    RT(cudaStreamDestroy(other));
    RT(cudaStreamDestroy(s));
    RT(cudaFree(d));
}

cudaError_t cudaMemsetAsync_ptsz(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemcpyAsync_ptsz(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaStreamDestroy(cudaStream_t);

/* The _ptsz forms a --default-stream per-thread program calls: a NULL stream is the thread's
 * per-thread default stream (work on it runs and is waited for there); the _ptds forms copy. */
static void per_thread_forms(void) {
    enum { N = 4096 };
    unsigned char *d, back[N], src[N];
    RT(cudaMalloc((void **)&d, N));
    RT(cudaMemsetAsync_ptsz(d, 0x5a, N, NULL));
    RT(cudaStreamSynchronize_ptsz(NULL));
    RT(cudaStreamQuery_ptsz(NULL));
    RT(cudaMemcpyAsync_ptsz(back, d, N, cudaMemcpyDeviceToHost, NULL));
    RT(cudaStreamSynchronize(cudaStreamPerThread));
    for (int i = 0; i < N; i++) EXPECT(back[i] == 0x5a);
    for (int i = 0; i < N; i++) src[i] = (unsigned char)i;
    RT(cudaMemcpy_ptds(d, src, N, cudaMemcpyHostToDevice));
    RT(cudaMemcpy_ptds(back, d, N, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, src, N) == 0);
    EXPECT(cudaStreamDestroy(cudaStreamPerThread) != cudaSuccess); /* not the program's to destroy */
    (void)cudaGetLastError();
    RT(cudaFree(d));
}

void more_families(void) {
    (void)errname; /* from check.h; this file checks runtime errors */
    graphs();
    graph_nodes();
    pools();
    launches();
    arrays();
    textures();
    stream_attributes();
    per_thread_forms();
    graph_hosts();
    printf("rt families ok\n");
}

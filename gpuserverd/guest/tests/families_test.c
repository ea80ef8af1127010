/* The hand-written driver-API families (issue 14) through the guest library, against a gpuserverd
 * on the simulated backend: virtual memory (with the quota), memory pools (with the quota),
 * arrays and 3-D copies, texture and surface objects, graphs and stream capture, launches with
 * attributes. The session's quota is given as argv[1] in MiB (0: none, the quota checks skipped).
 *
 * On a GPU (gpuserverd's cuda backend, or natively on NVIDIA's driver) GPUCLOUD_FAMILIES_IMAGE
 * names a cubin with fill_u32 (gputests/families.cu) and GPUCLOUD_FAMILIES_REAL=1 skips the
 * checks of refusals whose exact code the simulator chose (NVIDIA documents no single one). */
#include "check.h"

#include <stdio.h>

#include <stdint.h>
#include <string.h>

#define MIB (1ull << 20)
static size_t quota;
static CUfunction fill;
static int real; /* on NVIDIA's driver, directly or through gpuserverd's cuda backend */

static void vmm(void) {
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran == 2 * MIB);
    size_t size = 2 * gran;
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    EXPECT_RC(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemCreate(&h, size, &prop, 0));
    CUmemAllocationProp got;
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    EXPECT(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT(got.allocFlags.compressionType == 0);
    {   /* Compressible memory asked for reaches the driver, and the properties say what it gave (the
         * simulator, like a GPU that compresses, gives it). */
        CUmemAllocationProp cp = prop;
        cp.allocFlags.compressionType = 1; /* CU_MEM_ALLOCATION_COMP_GENERIC */
        CUmemGenericAllocationHandle ch;
        CHECK(cuMemCreate(&ch, gran, &cp, 0));
        CUmemAllocationProp cgot;
        CHECK(cuMemGetAllocationPropertiesFromHandle(&cgot, ch));
        if (!real) EXPECT(cgot.allocFlags.compressionType == 1);
        CHECK(cuMemRelease(ch));
    }
    CHECK(cuMemMap(va, size, 0, h, 0));
    EXPECT_RC(cuMemMap(va, size, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps */
    /* Mapped without access: the device may not touch it. */
    unsigned char back[64];
    if (!real) EXPECT(cuMemcpyDtoH(back, va, sizeof back) != CUDA_SUCCESS); /* a GPU would fault: sticky */
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, size, &acc, 1));
    /* Write and read through the mapping, also from a kernel. */
    unsigned data[1024];
    for (int i = 0; i < 1024; i++) data[i] = i * 3 + 1;
    CHECK(cuMemcpyHtoD(va + gran, data, sizeof data));
    unsigned out[1024] = {0};
    CHECK(cuMemcpyDtoH(out, va + gran, sizeof out));
    EXPECT(memcmp(out, data, sizeof data) == 0);
    CUdeviceptr p = va;
    unsigned v = 77;
    int n = 256;
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(out, va, 256 * 4));
    EXPECT(out[0] == 77 && out[255] == 77);
    CUmemGenericAllocationHandle h2;
    CHECK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + 8)));
    EXPECT(h2 == h);
    CHECK(cuMemRelease(h2));
    /* Quota: physical memory past the session's share is refused, and given back by release
     * only once its mapping is gone too. */
    size_t big = (quota / gran) * gran;
    CUmemGenericAllocationHandle hq;
    if (quota) EXPECT_RC(cuMemCreate(&hq, big, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemRelease(h)); /* still mapped: still charged */
    if (quota) EXPECT_RC(cuMemCreate(&hq, big, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    if (!real) EXPECT_RC(cuMemAddressFree(va, 2 * size), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CHECK(cuMemUnmap(va, size));
    if (quota) {
        CHECK(cuMemCreate(&hq, big, &prop, 0));
        CHECK(cuMemRelease(hq));
    }
    CHECK(cuMemAddressFree(va, 2 * size));
    printf("vmm ok\n");
}

/* Reservations are the process's: mapped in a context that is then destroyed, they are unmapped
 * and freed with no context current (NVIDIA's memMapIPCDrv). */
static void vmm_without_context(void) {
    CUcontext primary, own, none;
    CHECK(cuCtxPopCurrent(&primary));
    CHECK(cuCtxCreate(&own, 0, 0));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t size = 2 * MIB;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemCreate(&h, size, &prop, 0));
    CHECK(cuMemMap(va, size, 0, h, 0));
    CHECK(cuMemRelease(h));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, size, &acc, 1));
    CHECK(cuCtxDestroy(own));
    EXPECT(cuCtxGetCurrent(&none) == CUDA_SUCCESS && none == NULL);
    CHECK(cuMemUnmap(va, size));
    CHECK(cuMemAddressFree(va, size));
    EXPECT(cuCtxGetCurrent(&none) == CUDA_SUCCESS && none == NULL); /* none left behind */
    CHECK(cuCtxPushCurrent(primary));
    printf("vmm without a context ok\n");
}

static void pools(void) {
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CUmemoryPool def, cur;
    CHECK(cuDeviceGetDefaultMemPool(&def, 0));
    CHECK(cuDeviceGetMemPool(&cur, 0));
    EXPECT(def && def == cur);
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, 1 * MIB, s));
    unsigned v = 5;
    int n = 1024;
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
    unsigned out[4];
    CHECK(cuMemcpyDtoHAsync(out, p + 4000, sizeof out, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(out[0] == 5 && out[3] == 5);
    CHECK(cuMemFreeAsync(p, s));
    /* A pool that keeps what is freed until trimmed. */
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep = UINT64_MAX, got = 0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    CHECK(cuMemAllocFromPoolAsync(&p, 4 * MIB, pool, s));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
    EXPECT(got >= 4 * MIB);
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
    EXPECT(got == 0);
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &got));
    EXPECT(got >= 4 * MIB); /* kept: the threshold is above it */
    CHECK(cuMemPoolTrimTo(pool, 0));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &got));
    EXPECT(got == 0);
    int reuse = -1;
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    EXPECT(reuse == 1);
    /* Quota: a stream-ordered allocation past the session's share is refused. */
    if (quota) EXPECT_RC(cuMemAllocAsync(&p, quota + MIB, s), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuDeviceSetMemPool(0, pool));
    CHECK(cuDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool);
    CHECK(cuDeviceSetMemPool(0, def));
    CHECK(cuMemPoolDestroy(pool));
    if (!real) EXPECT_RC(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamDestroy(s));
    printf("pools ok\n");
}

static void arrays(void) {
    enum { W = 37, H = 11, D = 5 }; /* floats x rows x slices */
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = W, .Height = H, .Depth = D, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray arr;
    CHECK(cuArray3DCreate(&arr, &ad));
    CUDA_ARRAY3D_DESCRIPTOR back;
    CHECK(cuArray3DGetDescriptor(&back, arr));
    EXPECT(back.Width == W && back.Height == H && back.Depth == D && back.Format == CU_AD_FORMAT_FLOAT);
    CUDA_ARRAY_DESCRIPTOR d2;
    if (!real) EXPECT_RC(cuArrayGetDescriptor(&d2, arr), CUDA_ERROR_INVALID_VALUE);
    /* A pitched host block (padding between rows and slices) into the array. */
    size_t hpitch = W * 4 + 12, hheight = H + 2;
    static float host[(H + 2) * D * (W + 3)], out[(H + 2) * D * (W + 3)];
    for (size_t z = 0; z < D; z++)
        for (size_t y = 0; y < H; y++)
            for (size_t x = 0; x < W; x++) *(float *)((char *)host + z * hpitch * hheight + y * hpitch + x * 4) = z * 1000 + y * 50 + x;
    CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = hpitch, .srcHeight = hheight,
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = arr,
                       .WidthInBytes = W * 4, .Height = H, .Depth = D};
    CHECK(cuMemcpy3D(&c));
    /* Array to pitched device memory, then device back to a pitched host block. */
    CUdeviceptr dev;
    size_t dpitch;
    CHECK(cuMemAllocPitch(&dev, &dpitch, W * 4, H * D, 4));
    CUDA_MEMCPY3D c2 = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = arr, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = dev, .dstPitch = dpitch, .dstHeight = H, .WidthInBytes = W * 4, .Height = H, .Depth = D};
    CHECK(cuMemcpy3D(&c2));
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev, .srcPitch = dpitch, .srcHeight = H,
                        .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out, .dstPitch = hpitch, .dstHeight = hheight,
                        .WidthInBytes = W * 4, .Height = H, .Depth = D};
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemcpy3DAsync(&c3, s));
    CHECK(cuStreamSynchronize(s));
    for (size_t z = 0; z < D; z++)
        for (size_t y = 0; y < H; y++)
            EXPECT(memcmp((char *)out + z * hpitch * hheight + y * hpitch, (char *)host + z * hpitch * hheight + y * hpitch, W * 4) == 0);
    /* A box inside the array: slice 2, rows 3.., bytes 8.. */
    float one[4];
    CUDA_MEMCPY3D c4 = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = arr, .srcXInBytes = 8, .srcY = 3, .srcZ = 2,
                        .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = one, .WidthInBytes = 16, .Height = 1, .Depth = 1};
    CHECK(cuMemcpy3D(&c4));
    EXPECT(one[0] == 2 * 1000 + 3 * 50 + 2 && one[3] == 2 * 1000 + 3 * 50 + 5);
    /* Outside the array: refused. */
    c4.srcZ = D;
    EXPECT(cuMemcpy3D(&c4) != CUDA_SUCCESS);
    /* 2-D with an array side, and the 1-D array copies. */
    CUDA_ARRAY_DESCRIPTOR a2d = {.Width = 16, .Height = 4, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 4};
    CUarray flat;
    CHECK(cuArrayCreate(&flat, &a2d));
    unsigned char rows[4][64], rows2[4][64];
    for (int i = 0; i < 256; i++) rows[i / 64][i % 64] = (unsigned char)(i * 7);
    CUDA_MEMCPY2D m2 = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = rows, .srcPitch = 64,
                        .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = flat, .WidthInBytes = 64, .Height = 4};
    CHECK(cuMemcpy2D(&m2));
    CHECK(cuMemcpyAtoH(rows2[0], flat, 0, 64));
    EXPECT(memcmp(rows2[0], rows[0], 64) == 0);
    CHECK(cuMemcpyHtoA(flat, 4, "abcd", 4));
    CHECK(cuMemcpyAtoD(dev, flat, 0, 8));
    CHECK(cuMemcpyDtoH(rows2[1], dev, 8));
    EXPECT(memcmp(rows2[1], rows[0], 4) == 0 && memcmp(rows2[1] + 4, "abcd", 4) == 0);
    CHECK(cuArrayDestroy(flat));
    CHECK(cuArrayDestroy(arr));
    EXPECT_RC(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuMemFree(dev));
    CHECK(cuStreamDestroy(s));
    printf("arrays ok\n");
}

static void textures(void) {
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4,
                                  .Flags = CUDA_ARRAY3D_SURFACE_LDST};
    CUarray arr;
    CHECK(cuArray3DCreate(&arr, &ad));
    CUDA_RESOURCE_DESC rd = {.resType = CU_RESOURCE_TYPE_ARRAY, .res.array.hArray = arr};
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_LINEAR};
    CUtexObject tex;
    CHECK(cuTexObjectCreate(&tex, &rd, &td, NULL));
    CUDA_RESOURCE_DESC back;
    CHECK(cuTexObjectGetResourceDesc(&back, tex));
    EXPECT(back.resType == CU_RESOURCE_TYPE_ARRAY && back.res.array.hArray == arr);
    /* Linear memory. */
    CUdeviceptr lin;
    CHECK(cuMemAlloc(&lin, 4096));
    CUDA_RESOURCE_DESC rl = {.resType = CU_RESOURCE_TYPE_LINEAR, .res.linear = {lin, CU_AD_FORMAT_UNSIGNED_INT32, 1, 4096}};
    CUtexObject tl;
    CHECK(cuTexObjectCreate(&tl, &rl, &td, NULL));
    CHECK(cuTexObjectGetResourceDesc(&back, tl));
    EXPECT(back.resType == CU_RESOURCE_TYPE_LINEAR && back.res.linear.devPtr == lin &&
           back.res.linear.sizeInBytes == 4096 && back.res.linear.format == CU_AD_FORMAT_UNSIGNED_INT32);
    rl.res.linear.sizeInBytes = 8192; /* past the allocation */
    if (!real) EXPECT(cuTexObjectCreate(&tl, &rl, &td, NULL) != CUDA_SUCCESS);
    CUsurfObject surf;
    CHECK(cuSurfObjectCreate(&surf, &rd));
    if (!real) EXPECT_RC(cuTexObjectDestroy(surf == tex ? surf + 1000 : surf), CUDA_ERROR_INVALID_HANDLE); /* not a texture */
    CHECK(cuSurfObjectDestroy(surf));
    CHECK(cuTexObjectDestroy(tex));
    CHECK(cuTexObjectDestroy(tl));
    if (!real) EXPECT_RC(cuTexObjectDestroy(tex), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuArrayDestroy(arr));
    CHECK(cuMemFree(lin));
    printf("textures ok\n");
}

static void graphs(void) {
    enum { N = 1024 };
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, N * 4));
    CHECK(cuMemAlloc(&b, N * 4));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    /* Capture: a memset of a, a kernel filling b; nothing runs until the graph is launched. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    CHECK(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK(cuMemsetD32Async(a, 0x11111111, N, s));
    unsigned v = 9;
    int n = N;
    void *args[] = {&b, &v, &n};
    CHECK(cuLaunchKernel(fill, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE);
    unsigned out[N];
    CHECK(cuMemsetD32(a, 0, N));
    CHECK(cuMemsetD32(b, 0, N));
    CHECK(cuMemcpyDtoH(out, b, sizeof out));
    EXPECT(out[0] == 0); /* captured, not run */
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    EXPECT(count == 2);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 2; round++) { /* replay twice */
        CHECK(cuMemsetD32(a, 0, N));
        CHECK(cuMemsetD32(b, 0, N));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(out, a, sizeof out));
        EXPECT(out[0] == 0x11111111 && out[N - 1] == 0x11111111);
        CHECK(cuMemcpyDtoH(out, b, sizeof out));
        EXPECT(out[0] == 9 && out[N - 1] == 9);
    }
    /* A copy from pageable memory is captured through a bounce buffer (graphpageable_test); a 3-D
     * copy with a host side cannot be captured: the capture is invalidated. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync(a, out, 64, s));
    CUDA_MEMCPY3D host3d = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = out, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                            .dstDevice = a, .WidthInBytes = 16, .Height = 2, .Depth = 1};
    EXPECT_RC(cuMemcpy3DAsync(&host3d, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph bad;
    EXPECT_RC(cuStreamEndCapture(s, &bad), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* Built by hand: memset -> kernel, and an empty node after both; then an update. */
    CUgraph h;
    CHECK(cuGraphCreate(&h, 0));
    CUDA_MEMSET_NODE_PARAMS mp = {.dst = a, .value = 3, .elementSize = 4, .width = N, .height = 1};
    CUgraphNode ms, kn, en;
    CHECK(cuGraphAddMemsetNode(&ms, h, NULL, 0, &mp, NULL));
    CUDA_KERNEL_NODE_PARAMS kp = {.func = fill, .gridDimX = N / 256, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                                  .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
    CHECK(cuGraphAddKernelNode(&kn, h, &ms, 1, &kp));
    CUgraphNode both[] = {ms, kn};
    CHECK(cuGraphAddEmptyNode(&en, h, both, 2));
    CUDA_MEMCPY3D cp = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = b, .WidthInBytes = 16, .Height = 1, .Depth = 1};
    CUgraphNode mc;
    CHECK(cuGraphAddMemcpyNode(&mc, h, &en, 1, &cp, NULL));
    CUgraphNode nodes[8];
    count = 8;
    CHECK(cuGraphGetNodes(h, nodes, &count));
    EXPECT(count == 4 && nodes[0] == ms && nodes[3] == mc);
    CUgraphExec y;
    CHECK(cuGraphInstantiate(&y, h, 0));
    CHECK(cuGraphLaunch(y, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(out, b, sizeof out));
    EXPECT(out[0] == 3 && out[3] == 3 && out[4] == 9); /* the copy ran after the kernel */
    CUgraphExecUpdateResultInfo info;
    EXPECT_RC(cuGraphExecUpdate(y, g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(h));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK(cuStreamDestroy(s));
    printf("graphs ok\n");
}

static void launches(void) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 4096));
    unsigned v = 42;
    int n = 1024;
    void *args[] = {&p, &v, &n};
    CUlaunchAttribute at[2] = {{.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = {2, 1, 1}},
                               {.id = CU_LAUNCH_ATTRIBUTE_PRIORITY, .value.priority = -1}};
    CUlaunchConfig cfg = {.gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256, .blockDimY = 1,
                          .blockDimZ = 1, .attrs = at, .numAttrs = 2};
    CHECK(cuLaunchKernelEx(&cfg, fill, args, NULL));
    unsigned out[4];
    CHECK(cuMemcpyDtoH(out, p + 4080, sizeof out));
    EXPECT(out[0] == 42 && out[3] == 42);
    at[0].value.clusterDim.x = 3; /* does not tile the grid */
    CUresult rc = cuLaunchKernelEx(&cfg, fill, args, NULL);
    if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize(); /* refused at the launch or at the next synchronisation */
    EXPECT(rc != CUDA_SUCCESS);
    if (!real) EXPECT(rc == CUDA_ERROR_INVALID_VALUE);
    v = 43;
    CHECK(cuLaunchCooperativeKernel(fill, 4, 1, 1, 256, 1, 1, 0, NULL, args));
    CHECK(cuMemcpyDtoH(out, p, sizeof out));
    EXPECT(out[0] == 43);
    EXPECT_RC(cuLaunchCooperativeKernel(fill, 1000000, 1, 1, 256, 1, 1, 0, NULL, args),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CHECK(cuMemFree(p));
    printf("launches ok\n");
}

static void pointers(void) {
    CUdeviceptr p, base = 0;
    CHECK(cuMemAlloc(&p, 8192));
    unsigned type = 0;
    size_t size = 0;
    int ordinal = -1;
    CUcontext ctx = NULL, cur;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
    EXPECT(type == CU_MEMORYTYPE_DEVICE);
    CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100));
    CHECK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100));
    EXPECT(base == p && size == 8192);
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[] = {&ctx, &ordinal};
    CHECK(cuPointerGetAttributes(2, as, data, p));
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(ctx == cur && ordinal == 0);
    static char host[64];
    EXPECT_RC(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)(uintptr_t)host),
              CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute t = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void *td[] = {&type};
    CHECK(cuPointerGetAttributes(1, &t, td, (CUdeviceptr)(uintptr_t)host)); /* answered: not CUDA memory */
    if (!real) EXPECT(type == 0);
    CHECK(cuMemFree(p));
    printf("pointers ok\n");
}

static void memops(void) {
    CUdeviceptr flag, data;
    CHECK(cuMemAlloc(&flag, 64));
    CHECK(cuMemAlloc(&data, 4096));
    CHECK(cuMemsetD32(flag, 0, 16));
    CUstream a, b;
    CHECK(cuStreamCreate(&a, 1)); /* non-blocking: only the flag orders the two */
    CHECK(cuStreamCreate(&b, 1));
    /* a waits for the flag, then fills; nothing runs on a until b writes it. */
    CHECK(cuStreamWaitValue32(a, flag, 1, CU_STREAM_WAIT_VALUE_EQ));
    unsigned v = 17;
    int n = 1024;
    void *args[] = {&data, &v, &n};
    CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, a, args, NULL));
    EXPECT_RC(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[0].writeValue.address = flag + 8;
    ops[0].writeValue.value64 = 0x100000002ull;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[1].writeValue.address = flag;
    ops[1].writeValue.value = 1;
    CHECK(cuStreamBatchMemOp(b, 2, ops, 0));
    CHECK(cuStreamSynchronize(a));
    unsigned out[4];
    CHECK(cuMemcpyDtoH(out, data + 4080, sizeof out));
    EXPECT(out[0] == 17 && out[3] == 17);
    unsigned long long w = 0;
    CHECK(cuMemcpyDtoH(&w, flag + 8, 8));
    EXPECT(w == 0x100000002ull);
    CHECK(cuStreamWriteValue64(b, flag + 16, 5, 0));
    CHECK(cuStreamWaitValue64(a, flag + 16, 5, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK(cuStreamSynchronize(a));
    CHECK(cuStreamDestroy(a));
    CHECK(cuStreamDestroy(b));
    CHECK(cuMemFree(flag));
    CHECK(cuMemFree(data));
    printf("memops ok\n");
}

static void tensormaps(void) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 64 * 64 * 4));
    cuuint64_t dims[2] = {64, 64}, strides[1] = {64 * 4};
    cuuint32_t box[2] = {32, 32}, es[2] = {1, 1};
    CUtensorMap a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0xff, sizeof b);
    CHECK(cuTensorMapEncodeTiled(&a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p, dims, strides, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    CHECK(cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p, dims, strides, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    EXPECT(memcmp(&a, &b, sizeof a) == 0); /* deterministic */
    box[1] = 16;
    CHECK(cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p, dims, strides, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    EXPECT(memcmp(&a, &b, sizeof a) != 0);
    /* An address off the 16-byte alignment, a stride off 16 bytes: refused. */
    EXPECT_RC(cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)(p + 4), dims, strides,
                                     box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_ERROR_INVALID_VALUE);
    strides[0] = 100;
    EXPECT_RC(cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p, dims, strides, box, es,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_ERROR_INVALID_VALUE);
    /* im2col over an NHWC tensor of 4 x 8 x 8 x 16 halves. */
    cuuint64_t d4[4] = {16, 8, 8, 4}, s4[3] = {16 * 2, 16 * 2 * 8, 16 * 2 * 64};
    cuuint32_t es4[4] = {1, 1, 1, 1};
    int lo[2] = {-1, -1}, hi[2] = {1, 1};
    CHECK(cuTensorMapEncodeIm2col(&a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)(uintptr_t)p, d4, s4, lo, hi, 16, 32, es4,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    CHECK(cuMemFree(p));
    printf("tensormaps ok\n");
}

/* Linking two simulator images (the GPU run has no such inputs: skipped there). */
static void linking(void) {
    if (real) return;
    static const char a[] = "GPUSIM-MODULE 1\nkernel fill_u32\n", b[] = "GPUSIM-MODULE 1\nkernel vector_add_f32\nglobal counter 64\n";
    CUlinkState l;
    CHECK(cuLinkCreate(0, NULL, NULL, &l));
    CHECK(cuLinkAddData(l, CU_JIT_INPUT_PTX, (void *)a, sizeof a, "a.ptx", 0, NULL, NULL));
    CHECK(cuLinkAddData(l, CU_JIT_INPUT_PTX, (void *)b, sizeof b, "b.ptx", 0, NULL, NULL));
    EXPECT_RC(cuLinkAddData(l, CU_JIT_INPUT_PTX, (void *)a, sizeof a, "again.ptx", 0, NULL, NULL), CUDA_ERROR_INVALID_IMAGE);
    void *img;
    size_t n;
    CHECK(cuLinkComplete(l, &img, &n));
    EXPECT(n > 0);
    CUmodule m;
    CHECK(cuModuleLoadData(&m, img));
    CUfunction f1, f2;
    CHECK(cuModuleGetFunction(&f1, m, "fill_u32"));
    CHECK(cuModuleGetFunction(&f2, m, "vector_add_f32"));
    CUdeviceptr g;
    size_t gsize;
    CHECK(cuModuleGetGlobal(&g, &gsize, m, "counter"));
    EXPECT(gsize == 64);
    CHECK(cuModuleUnload(m));
    CHECK(cuLinkDestroy(l));
    CUlinkState empty;
    CHECK(cuLinkCreate(0, NULL, NULL, &empty));
    EXPECT_RC(cuLinkComplete(empty, &img, &n), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuLinkAddFile(empty, CU_JIT_INPUT_PTX, "/nonexistent/x.ptx", 0, NULL, NULL), CUDA_ERROR_FILE_NOT_FOUND);
    CHECK(cuLinkDestroy(empty));
    printf("linking ok\n");
}

int main(int argc, char **argv) {
    quota = (argc > 1 ? (size_t)atoi(argv[1]) : 0) * MIB;
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    real = getenv("GPUCLOUD_FAMILIES_REAL") != NULL;
    CUmodule mod;
    const char *image = getenv("GPUCLOUD_FAMILIES_IMAGE");
    if (image) {
        static char buf[1 << 20];
        FILE *f = fopen(image, "rb");
        EXPECT(f != NULL);
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        EXPECT(n > 0 && n < sizeof buf);
        CHECK(cuModuleLoadData(&mod, buf));
    } else {
        CHECK(cuModuleLoadData(&mod, sim_image));
    }
    CHECK(cuModuleGetFunction(&fill, mod, "fill_u32"));
    vmm();
    vmm_without_context();
    pools();
    arrays();
    textures();
    graphs();
    launches();
    pointers();
    memops();
    tensormaps();
    linking();
    printf("families_test: OK\n");
    return 0;
}

/* The generated generic path (apigen) end to end, against a gpuserverd on the simulated backend
 * with two GPUs in the session: peer queries answered for the session's devices (and refused for
 * devices it was not granted), stream and function properties by handle, a context query,
 * occupancy, an asynchronous setting, and a refused function that says so. Prints "gen_test: OK". */
#include "check.h"

/* NVIDIA's prototypes of generated entry points the guest's cuda.h does not declare. */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice srcDevice, CUdevice dstDevice);
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags);
CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize);
CUresult cuFuncSetCacheConfig(CUfunction hfunc, int config);
CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height);
CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId);
CUresult cuCtxResetPersistingL2Cache(void);

int main(void) {
    CHECK(cuInit(0));
    int can = 9, n = 0;
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == 2);
    /* Peer queries need no context, as with NVIDIA's driver. */
    CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
    EXPECT(can == 1);
    CHECK(cuDeviceCanAccessPeer(&can, 1, 1));
    EXPECT(can == 0);
    EXPECT_RC(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE); /* not granted */
    EXPECT_RC(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
    int v = 9;
    CHECK(cuDeviceGetP2PAttribute(&v, 2 /* ACCESS_SUPPORTED */, 0, 1));
    EXPECT(v == 1);
    EXPECT_RC(cuDeviceGetP2PAttribute(&v, 2, 1, 1), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC(cuDeviceGetP2PAttribute(&v, 99, 0, 1), CUDA_ERROR_INVALID_VALUE);

    /* A context call needs a current context, as with NVIDIA's driver; one without parameters too. */
    EXPECT_RC(cuCtxResetPersistingL2Cache(), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuCtxResetPersistingL2Cache());
    int least = 9, greatest = 9;
    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    EXPECT(least == 0 && greatest == -5);
    CHECK(cuCtxGetStreamPriorityRange(NULL, &greatest)); /* a NULL output is left alone */

    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned flags = 9;
    CHECK(cuStreamGetFlags(s, &flags));
    EXPECT(flags == CU_STREAM_NON_BLOCKING);
    CHECK(cuStreamGetFlags_ptsz(NULL, &flags));
    EXPECT(flags == 0);
    CHECK(cuStreamDestroy(s));
    EXPECT_RC(cuStreamGetFlags(s, &flags), CUDA_ERROR_INVALID_HANDLE); /* gone on the server */
    unsigned long long id = 0;
    EXPECT_RC(cuStreamGetId(NULL, &id), CUDA_ERROR_NOT_SUPPORTED); /* the simulator does not model it */

    CUmodule mod;
    CUfunction saxpy;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy_f32"));
    size_t off = 99, size = 99;
    CHECK(cuFuncGetParamInfo(saxpy, 1, &off, &size));
    EXPECT(size > 0 && off > 0);
    EXPECT_RC(cuFuncGetParamInfo(saxpy, 99, &off, &size), CUDA_ERROR_INVALID_VALUE);
    size_t smem = 0;
    CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem, saxpy, 2, 256));
    EXPECT(smem > 48 * 1024 && smem <= 227 * 1024);
    /* Sent without waiting: a refusal surfaces at the next synchronising call, as an
     * asynchronous error does, and only there. */
    CHECK(cuFuncSetCacheConfig(saxpy, 1));
    CHECK(cuCtxSynchronize());
    CHECK(cuFuncSetCacheConfig(saxpy, 7));
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCtxSynchronize());

    /* A refused function fails, naming itself once on stderr (the Go test checks the notice). */
    EXPECT_RC(cuLaunchGrid(saxpy, 1, 1), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_RC(cuLaunchGrid(saxpy, 1, 1), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuModuleUnload(mod));
    printf("gen_test: OK\n");
    return 0;
}

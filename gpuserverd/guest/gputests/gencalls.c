// The generated generic path against NVIDIA's driver: the same binary runs natively and through
// gpucloud's guest library, printing one line per call (result and outputs); the two outputs
// must be identical. Built against gpucloud's include/cuda.h or the toolkit's, with -lcuda.
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice srcDevice, CUdevice dstDevice);
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags);
CUresult cuStreamGetPriority(CUstream hStream, int *priority);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize);
CUresult cuFuncSetCacheConfig(CUfunction hfunc, int config);
CUresult cuDeviceGetExecAffinitySupport(int *pi, int type, CUdevice dev);
CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, int format, unsigned numChannels, CUdevice dev);
CUresult cuFuncIsLoaded(int *state, CUfunction function);
CUresult cuCtxGetFlags(unsigned int *flags);
CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height);

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry k(.param .u64 a, .param .u32 b, .param .f32 c)\n{ ret; }\n";

#define SAY(call, fmt, ...) printf("%-48s -> %d " fmt "\n", #call, (int)(call), __VA_ARGS__)

int main(void) {
	int i = -1, j = -1;
	unsigned u = 99;
	size_t a = 0, b = 0;
	if (cuInit(0) != CUDA_SUCCESS) return 2;
	SAY(cuDeviceCanAccessPeer(&i, 0, 0), "%d", i);
	SAY(cuDeviceGetP2PAttribute(&i, 2, 0, 0), "%d", i);
	SAY(cuDeviceGetExecAffinitySupport(&i, 0, 0), "%d", i);
	SAY(cuDeviceGetTexture1DLinearMaxWidth(&a, 0x20, 4, 0), "%zu", a);
	CUcontext ctx;
	if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return 2;
	SAY(cuCtxGetStreamPriorityRange(&i, &j), "%d %d", i, j);
	SAY(cuCtxGetFlags(&u), "%u", u);
	CUstream s;
	cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1);
	SAY(cuStreamGetFlags(s, &u), "%u", u);
	SAY(cuStreamGetPriority(s, &i), "%d", i);
	CUmodule m;
	CUfunction f;
	if (cuModuleLoadData(&m, ptx) != CUDA_SUCCESS || cuModuleGetFunction(&f, m, "k") != CUDA_SUCCESS) return 3;
	SAY(cuFuncIsLoaded(&i, f), "%d", i);
	SAY(cuFuncGetParamInfo(f, 1, &a, &b), "%zu %zu", a, b);
	SAY(cuFuncGetParamInfo(f, 2, &a, &b), "%zu %zu", a, b);
	SAY(cuFuncGetParamInfo(f, 3, &a, &b), "%zu %zu", a, b);
	SAY(cuOccupancyAvailableDynamicSMemPerBlock(&a, f, 2, 256), "%zu", a);
	SAY(cuFuncSetCacheConfig(f, 1), "%d", 0);
	SAY(cuCtxSynchronize(), "%d", 0);
	SAY(cuFuncSetCacheConfig(f, 7), "%d", 0);
	SAY(cuCtxSynchronize(), "%d", 0);
	cuStreamDestroy(s);
	cuModuleUnload(m);
	printf("gencalls: done\n");
	return 0;
}

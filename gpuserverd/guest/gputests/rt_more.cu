// Runtime API beyond the basics, every result checked on the CPU: pitched 2-D copies and
// memsets, a host function's place in stream order, > 48 KiB of dynamic shared memory through
// cudaFuncSetAttribute, occupancy against the kernel's and device's attributes, stream-ordered
// allocation, host registration, pointer queries, device flags, limits, driver entry points.
// A call the driver in use does not offer (cudaErrorNotSupported) is reported and skipped.
#include "rt_common.h"
#include <cuda_profiler_api.h>
#include <cstdint>
#include <cstring>

__global__ void add_pitched(float *p, size_t pitch, int width, int height, float k) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height) ((float *)((char *)p + y * pitch))[x] += k;
}

// Each block reverses its chunk through dynamic shared memory (the whole chunk at once).
__global__ void reverse_chunks(const float *in, float *out, int chunk) {
    extern __shared__ float buf[];
    const float *src = in + (size_t)blockIdx.x * chunk;
    float *dst = out + (size_t)blockIdx.x * chunk;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) buf[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = buf[chunk - 1 - i];
}

__global__ void fill(unsigned *p, unsigned v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

static int skipped = 0;

// supported reports whether e is success; cudaErrorNotSupported is a skip, anything else fails.
static bool supported(cudaError_t e, const char *what) {
    if (e == cudaErrorNotSupported) {
        cudaGetLastError();
        std::printf("  %s: not supported by this driver, skipped\n", what);
        skipped++;
        return false;
    }
    CHECK(e);
    return true;
}

static void pitched() {
    const int W = 1000, H = 37; // floats per row, rows
    float *d;
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&d, &pitch, W * sizeof(float), H));
    EXPECT(pitch >= W * sizeof(float), "pitch %zu for rows of %zu bytes", pitch, W * sizeof(float));
    static float src[H][W], out[H][W + 24];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) src[y][x] = y * 1000.0f + x;
    CHECK(cudaMemset2D(d, pitch, 0xff, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(d, pitch, src, sizeof src[0], W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    add_pitched<<<dim3((W + 127) / 128, H), 128, 0, s>>>(d, pitch, W, H, 0.5f);
    CHECK(cudaGetLastError());
    // Zero columns 100..199 of rows 10..19, then read the whole surface into wider host rows.
    CHECK(cudaMemset2DAsync((char *)d + 10 * pitch + 100 * sizeof(float), pitch, 0, 100 * sizeof(float), 10, s));
    CHECK(cudaMemcpy2DAsync(out, sizeof out[0], d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float want = (y >= 10 && y < 20 && x >= 100 && x < 200) ? 0.0f : src[y][x] + 0.5f;
            EXPECT(out[y][x] == want, "2-D [%d][%d] = %f, want %f", y, x, out[y][x], want);
        }
    cudaError_t e = cudaMemcpy2D(out, 16, d, pitch, W * sizeof(float), 2, cudaMemcpyDeviceToHost);
    EXPECT(e == cudaErrorInvalidPitchValue || e == cudaErrorInvalidValue, "row wider than its pitch: %s", cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
}

struct order {
    unsigned *h, *h2;
    int n, calls, saw_copy;
};

// Runs after a device-to-host copy queued before it and before a host-to-device copy queued after.
static void after_copy(void *p) {
    order *o = (order *)p;
    o->saw_copy = 1;
    for (int i = 0; i < o->n; i++) o->saw_copy &= o->h[i] == 7u + i;
    for (int i = 0; i < o->n; i++) o->h2[i] = 1000u + 3u * i;
    o->calls++;
}

static void host_function_order() {
    const int n = 1 << 22;
    unsigned *d, *h, *h2;
    CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
    CHECK(cudaMallocHost(&h, n * sizeof(unsigned)));
    CHECK(cudaMallocHost(&h2, n * sizeof(unsigned)));
    std::memset(h, 0, n * sizeof(unsigned));
    order o = {h, h2, n, 0, 0};
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fill<<<(n + 255) / 256, 256, 0, s>>>(d, 7u, n);
    CHECK(cudaMemcpyAsync(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, after_copy, &o));
    CHECK(cudaMemcpyAsync(d, h2, n * sizeof(unsigned), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(o.calls == 1, "host function ran %d times", o.calls);
    EXPECT(o.saw_copy, "host function ran before the copy queued ahead of it ended");
    for (int i = 0; i < n; i++) EXPECT(h[i] == 1000u + 3u * i, "h[%d] = %u: work after the host function started before it returned", i, h[i]);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(h2));
    CHECK(cudaFree(d));
}

static void big_shared() {
    const int chunk = 16384, blocks = 64, n = chunk * blocks; // 64 KiB of floats per block
    const size_t shared = chunk * sizeof(float);
    float *in, *out;
    CHECK(cudaMalloc(&in, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    static float h[chunk * 64], r[chunk * 64];
    for (int i = 0; i < n; i++) h[i] = i * 0.25f;
    CHECK(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice));
    // Without raising the kernel's limit, 64 KiB is refused (at launch or, remote, at the next sync).
    reverse_chunks<<<blocks, 256, shared>>>(in, out, chunk);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorInvalidValue || e == cudaErrorLaunchOutOfResources, "64 KiB without cudaFuncSetAttribute: %s",
           cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaFuncSetAttribute(reverse_chunks, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, reverse_chunks));
    EXPECT(fa.maxDynamicSharedSizeBytes == (int)shared, "max dynamic shared %d", fa.maxDynamicSharedSizeBytes);
    reverse_chunks<<<blocks, 256, shared>>>(in, out, chunk);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < chunk; i++)
            EXPECT(r[b * chunk + i] == h[b * chunk + chunk - 1 - i], "reversed[%d][%d] = %f", b, i, r[b * chunk + i]);

    // Occupancy against what the kernel and the device say.
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    int small = 0, big = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&small, reverse_chunks, 256, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&big, reverse_chunks, 256, shared, cudaOccupancyDefault));
    EXPECT(small >= 1 && small * 256 <= p.maxThreadsPerMultiProcessor, "occupancy %d blocks of 256 threads (SM holds %d)", small, p.maxThreadsPerMultiProcessor);
    EXPECT(big >= 1 && big <= small && big * shared <= p.sharedMemPerMultiprocessor, "occupancy with 64 KiB: %d blocks, SM shared %zu",
           big, p.sharedMemPerMultiprocessor);
    EXPECT(fa.numRegs == 0 || (size_t)small * 256 * fa.numRegs <= (size_t)p.regsPerMultiprocessor, "%d blocks x 256 x %d registers > %d",
           small, fa.numRegs, p.regsPerMultiprocessor);
    CHECK(cudaFuncSetCacheConfig(fill, cudaFuncCachePreferL1));
    std::printf("  occupancy: %d blocks/SM, %d with 64 KiB shared; %d registers\n", small, big, fa.numRegs);
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
}

static void stream_ordered_and_host() {
    const int n = 1 << 20;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned flags = 0;
    CHECK(cudaStreamGetFlags(s, &flags));
    EXPECT(flags == cudaStreamNonBlocking, "stream flags %#x", flags);
    int prio = 1, least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CHECK(cudaStreamGetPriority(s, &prio));
    EXPECT(prio <= least && prio >= greatest, "priority %d outside [%d, %d]", prio, greatest, least);

    unsigned *d, *d2;
    CHECK(cudaMallocAsync((void **)&d, n * sizeof(unsigned), s));
    CHECK(cudaMallocAsync((void **)&d2, n * sizeof(unsigned), s));
    fill<<<(n + 255) / 256, 256, 0, s>>>(d, 11u, n);
    CHECK(cudaMemcpyPeerAsync(d2, 0, d, 0, n * sizeof(unsigned), s));
    CHECK(cudaFreeAsync(d, s)); // after the kernel and the copy that use it
    unsigned *h = (unsigned *)std::aligned_alloc(4096, n * sizeof(unsigned));
    EXPECT(h != nullptr, "aligned_alloc");
    bool registered = supported(cudaHostRegister(h, n * sizeof(unsigned), cudaHostRegisterDefault), "cudaHostRegister");
    CHECK(cudaMemcpyAsync(h, d2, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(d2, s));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CHECK(cudaEventRecordWithFlags(ev, s, cudaEventRecordDefault));
    CHECK(cudaEventSynchronize(ev));
    for (int i = 0; i < n; i++) EXPECT(h[i] == 11u + i, "h[%d] = %u after stream-ordered alloc/copy/free", i, h[i]);
    cudaPointerAttributes a;
    if (registered) {
        unsigned hf = 0;
        supported(cudaHostGetFlags(&hf, h), "cudaHostGetFlags");
        CHECK(cudaPointerGetAttributes(&a, h + 5));
        EXPECT(a.type == cudaMemoryTypeHost, "registered memory type %d", (int)a.type);
        CHECK(cudaHostUnregister(h));
    }
    CHECK(cudaPointerGetAttributes(&a, h));
    EXPECT(a.type == cudaMemoryTypeUnregistered, "plain memory type %d", (int)a.type);
    std::free(h);
    unsigned *dp, *hp;
    CHECK(cudaMalloc(&dp, 4096));
    CHECK(cudaMallocHost(&hp, 4096));
    CHECK(cudaPointerGetAttributes(&a, dp + 3));
    EXPECT(a.type == cudaMemoryTypeDevice && a.devicePointer == dp + 3 && a.device == 0, "device pointer: type %d device %d", (int)a.type, a.device);
    CHECK(cudaPointerGetAttributes(&a, hp));
    EXPECT(a.type == cudaMemoryTypeHost && a.hostPointer == hp, "pinned pointer: type %d", (int)a.type);
    int can = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
    EXPECT(can == 0, "device 0 peer of itself: %d", can);
    CHECK(cudaFree(dp));
    CHECK(cudaFreeHost(hp));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
}

static void device_and_driver() {
    unsigned flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    EXPECT((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync, "device flags %#x", flags);
    size_t stack = 0, now = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, stack + 1024));
    CHECK(cudaDeviceGetLimit(&now, cudaLimitStackSize));
    EXPECT(now >= stack + 1024, "stack limit %zu after asking %zu", now, stack + 1024);
    cudaFuncCache cc = cudaFuncCachePreferNone;
    CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    CHECK(cudaDeviceGetCacheConfig(&cc));
    // A device whose L1/shared split is fixed always reports no preference (NVIDIA's documentation).
    EXPECT(cc == cudaFuncCachePreferShared || cc == cudaFuncCachePreferNone, "cache configuration %d", (int)cc);
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    CHECK(cudaGetDriverEntryPointByVersion("cuDriverGetVersion", &fn, 12000, cudaEnableDefault, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && fn != nullptr, "entry point status %d", (int)st);
    int v = 0, rv = 0;
    EXPECT(((int (*)(int *))fn)(&v) == 0, "cuDriverGetVersion through its entry point");
    CHECK(cudaDriverGetVersion(&rv));
    EXPECT(v == rv && v > 0, "driver version %d through the entry point, %d through the runtime", v, rv);
    CHECK(cudaProfilerStart());
    CHECK(cudaProfilerStop());
    EXPECT(std::strcmp(cudaGetErrorName(cudaErrorInvalidPitchValue), "cudaErrorInvalidPitchValue") == 0, "error name %s",
           cudaGetErrorName(cudaErrorInvalidPitchValue));
    EXPECT(std::strcmp(cudaGetErrorName(cudaErrorNotSupported), "cudaErrorNotSupported") == 0, "error name %s",
           cudaGetErrorName(cudaErrorNotSupported));
}

int main() {
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    pitched();
    host_function_order();
    big_shared();
    stream_ordered_and_host();
    device_and_driver();
    CHECK(cudaDeviceSynchronize());
    std::printf("rt_more: OK (%d skipped as not supported)\n", skipped);
    return 0;
}

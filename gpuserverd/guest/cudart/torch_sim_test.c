/* What PyTorch relies on in gpucloud's libcudart, on the simulated backend, over a real session:
 *   torch_sim_test QUOTA [shm]
 * memory info answering the session's quota (torch sizes its caching allocator to it), event
 * timing, stream priorities, host callbacks in stream order, page-locked allocations (from the
 * shared arena with "shm": zero copy), capture-state queries answering "no capture", the
 * profiler switches, device properties and attributes torch reads, pointer queries, driver entry
 * points, and the calls refused cleanly (cudaErrorNotSupported, last error set). */
#include "../tests/check.h"

#include <stdint.h>

#include "rt_sim.h"

/* Not in cudart/testshim's header: declared as CUDA 13's are, types by size. */
cudaError_t cudaMemGetInfo(size_t *, size_t *);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *, unsigned);
cudaError_t cudaStreamIsCapturing(cudaStream_t, int *);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, int *, unsigned long long *, void **, const void **, const void **,
                                     size_t *);
cudaError_t cudaThreadExchangeStreamCaptureMode(int *);
cudaError_t cudaGraphLaunch(void *, cudaStream_t);
cudaError_t cudaIpcGetMemHandle(void *, void *);
cudaError_t cudaGLGetDevices(unsigned *, int *, unsigned, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDeviceDisablePeerAccess(int);
cudaError_t cudaProfilerStart(void);
cudaError_t cudaProfilerStop(void);
#define EVENT_DISABLE_TIMING 0x02
#define ERR_NOT_SUPPORTED 801
#define ERR_PEER_ALREADY_ENABLED 704

static void memory_info(size_t quota) {
    size_t free0, total;
    RT(cudaMemGetInfo(&free0, &total));
    printf("memory: free %zu total %zu\n", free0, total);
    EXPECT(total == quota && free0 <= total);
    struct cudaDeviceProp p;
    RT(cudaGetDeviceProperties(&p, 0));
    EXPECT(p.totalGlobalMem == quota); /* torch.cuda.get_device_properties(0).total_memory */
    void *d;
    RT(cudaMalloc(&d, 16 << 20));
    size_t free1;
    RT(cudaMemGetInfo(&free1, &total));
    EXPECT(free1 + (16 << 20) <= free0);
    RT(cudaFree(d));
    /* Past the quota: the allocation fails as out of memory, which torch turns into OutOfMemoryError. */
    EXPECT(cudaMalloc(&d, quota + (1 << 20)) == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
}

static void events(void) {
    enum { N = 64 << 20 };
    void *d;
    cudaEvent_t a, b, untimed;
    RT(cudaMalloc(&d, N));
    RT(cudaEventCreate(&a));
    RT(cudaEventCreate(&b));
    RT(cudaEventCreateWithFlags(&untimed, EVENT_DISABLE_TIMING));
    RT(cudaEventRecord(a, NULL));
    RT(cudaMemsetAsync(d, 1, N, NULL));
    RT(cudaEventRecord(b, NULL));
    RT(cudaEventRecord(untimed, NULL));
    RT(cudaEventSynchronize(b));
    float ms = -1;
    RT(cudaEventElapsedTime(&ms, a, b));
    EXPECT(ms >= 0);
    EXPECT(cudaEventElapsedTime(&ms, a, untimed) != cudaSuccess); /* no timing recorded */
    cudaGetLastError();
    RT(cudaEventDestroy(a));
    RT(cudaEventDestroy(b));
    RT(cudaEventDestroy(untimed));
    RT(cudaFree(d));
}

static void priorities(void) {
    int least = 99, greatest = 99;
    RT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    EXPECT(greatest <= least);
    cudaStream_t hi, lo;
    RT(cudaStreamCreateWithPriority(&hi, 1, greatest));
    RT(cudaStreamCreateWithPriority(&lo, 1, least + 5)); /* out of range: clamped, as NVIDIA's */
    int ph = 42, pl = 42;
    RT(cudaStreamGetPriority(hi, &ph));
    RT(cudaStreamGetPriority(lo, &pl));
    EXPECT(ph >= greatest && ph <= least && pl >= greatest && pl <= least);
    unsigned flags = 9;
    RT(cudaStreamGetFlags(hi, &flags));
    EXPECT(flags == 1);
    RT(cudaStreamDestroy(hi));
    RT(cudaStreamDestroy(lo));
}

/* A host function sees the stream's earlier copy done, and runs before its later work. */
struct order {
    unsigned *host;
    int seen, calls;
    cudaError_t status;
};
static void host_fn(void *data) {
    struct order *o = data;
    o->seen = (int)o->host[1023];
    o->calls++;
}
static void stream_cb(cudaStream_t s, cudaError_t status, void *data) {
    (void)s;
    struct order *o = data;
    o->status = status;
    o->seen = (int)o->host[0];
    o->calls++;
}

static void callbacks(int shm) {
    enum { N = 1 << 20 };
    unsigned *pinned, *d;
    RT(cudaHostAlloc((void **)&pinned, N * 4, 0));
    RT(cudaMalloc((void **)&d, N * 4));
    struct cudaPointerAttributes pa;
    RT(cudaPointerGetAttributes(&pa, pinned + 7));
    EXPECT(pa.type == cudaMemoryTypeHost);
    if (shm) { /* from the session's shared arena: a copy from it moves no bytes on the socket */
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];
        int in_arena = 0;
        while (f && fgets(line, sizeof line, f)) {
            unsigned long lo, hi;
            if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)pinned >= lo && (uintptr_t)pinned < hi)
                in_arena = strstr(line, "gpucloud-shm-") != NULL;
        }
        if (f) fclose(f);
        EXPECT(in_arena);
    }
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    RT(cudaMemsetAsync(d, 0x11, N * 4, s));
    RT(cudaMemcpyAsync(pinned, d, N * 4, cudaMemcpyDeviceToHost, s));
    struct order o = {pinned, 0, 0, (cudaError_t)-1};
    RT(cudaLaunchHostFunc(s, host_fn, &o));
    EXPECT(o.calls == 1 && o.seen == 0x11111111);
    RT(cudaMemsetAsync(d, 0x22, N * 4, s));
    RT(cudaMemcpyAsync(pinned, d, N * 4, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamAddCallback(s, stream_cb, &o, 0));
    RT(cudaStreamSynchronize(s));
    EXPECT(o.calls == 2 && o.seen == 0x22222222 && o.status == cudaSuccess);
    EXPECT(cudaLaunchHostFunc(s, NULL, NULL) == cudaErrorInvalidValue);
    cudaGetLastError();
    RT(cudaStreamDestroy(s));
    RT(cudaFree(d));
    RT(cudaFreeHost(pinned));
}

static void capture_state(void) {
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    int status = 7;
    RT(cudaStreamIsCapturing(s, &status));
    EXPECT(status == 0);
    status = 7;
    RT(cudaStreamIsCapturing(NULL, &status));
    EXPECT(status == 0);
    unsigned long long id = 5;
    void *graph = (void *)1;
    const void *deps = (void *)1;
    size_t ndeps = 3;
    status = 7;
    RT(cudaStreamGetCaptureInfo(s, &status, &id, &graph, &deps, NULL, &ndeps));
    EXPECT(status == 0 && id == 0 && graph == NULL && deps == NULL && ndeps == 0);
    EXPECT(cudaStreamIsCapturing(s, NULL) == cudaErrorInvalidValue);
    cudaGetLastError();
    int mode = 2; /* relaxed */
    RT(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == 0); /* the default, global */
    RT(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == 2);
    mode = 3;
    EXPECT(cudaThreadExchangeStreamCaptureMode(&mode) == cudaErrorInvalidValue && mode == 3);
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
    RT(cudaStreamDestroy(s));
}

static void refused_and_switches(void) {
    RT(cudaProfilerStart());
    RT(cudaProfilerStop());
    /* Graphs are remoted now (families.c): a null graph is the caller's error, not a refusal. */
    EXPECT(cudaGraphLaunch(NULL, NULL) != cudaSuccess && cudaGraphLaunch(NULL, NULL) != ERR_NOT_SUPPORTED);
    cudaGetLastError();
    unsigned gl_count = 0;
    int gl_devices[1];
    EXPECT(cudaGLGetDevices(&gl_count, gl_devices, 1, 1) == ERR_NOT_SUPPORTED); /* graphics interop: never */
    EXPECT(cudaGetLastError() == ERR_NOT_SUPPORTED && cudaGetLastError() == cudaSuccess);
    EXPECT(cudaGLGetDevices(&gl_count, gl_devices, 1, 1) == ERR_NOT_SUPPORTED); /* told once on stderr, refused each time */
    cudaGetLastError();
    /* IPC is remoted within an instance (ipc.c): a null pointer is the caller's error. */
    char handle[64];
    EXPECT(cudaIpcGetMemHandle(handle, NULL) == cudaErrorInvalidValue);
    cudaGetLastError();
    int n = 0;
    RT(cudaGetDeviceCount(&n));
    EXPECT(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorInvalidDevice); /* itself */
    cudaGetLastError();
    if (n > 1) { /* peer access between a session's GPUs: once, then "already enabled" (704) */
        EXPECT(cudaDeviceEnablePeerAccess(1, 0) == cudaSuccess);
        EXPECT(cudaDeviceEnablePeerAccess(1, 0) == ERR_PEER_ALREADY_ENABLED);
        EXPECT(cudaDeviceDisablePeerAccess(1) == cudaSuccess);
    }
    cudaGetLastError();

    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    RT(cudaGetDriverEntryPoint("cuMemAlloc", &fn, 0, &st));
    EXPECT(fn != NULL && st == cudaDriverEntryPointSuccess);
    fn = (void *)1;
    cudaGetDriverEntryPoint("cuNoSuchFunction", &fn, 0, &st);
    EXPECT(st == cudaDriverEntryPointSymbolNotFound && fn == NULL);
    cudaGetLastError();
}

static void properties(void) {
    struct cudaDeviceProp p;
    RT(cudaGetDeviceProperties(&p, 0));
    int v = 0;
    /* The fields torch's _CudaDeviceProperties and its launch heuristics read, and their attributes. */
    EXPECT(p.name[0] && p.major >= 7 && p.multiProcessorCount > 0 && p.warpSize == 32 && p.maxThreadsPerBlock >= 1024);
    EXPECT(p.maxThreadsPerMultiProcessor > 0 && p.regsPerMultiprocessor > 0 && p.sharedMemPerBlock > 0);
    EXPECT(p.sharedMemPerBlockOptin >= p.sharedMemPerBlock && p.sharedMemPerMultiprocessor > 0 && p.l2CacheSize > 0);
    EXPECT(p.maxGridSize[0] > 0 && p.integrated == 0);
    RT(cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)16 /* multiprocessor count */, 0));
    EXPECT(v == p.multiProcessorCount);
    RT(cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)75 /* compute capability major */, 0));
    EXPECT(v == p.major);
    printf("device: %s sm_%d%d, %d SMs\n", p.name, p.major, p.minor, p.multiProcessorCount);
}

int main(int argc, char **argv) {
    (void)errname; /* from check.h; this program checks runtime errors */
    if (argc < 2) {
        fprintf(stderr, "usage: torch_sim_test QUOTA [shm]\n");
        return 2;
    }
    size_t quota = strtoull(argv[1], NULL, 10);
    int shm = argc > 2 && strcmp(argv[2], "shm") == 0;
    RT(cudaSetDevice(0));
    memory_info(quota);
    events();
    priorities();
    callbacks(shm);
    capture_state();
    refused_and_switches();
    properties();
    printf("torch_sim_test: OK\n");
    return 0;
}

/* gpucloud's libcudart on the simulated backend, driven the way nvcc's generated code drives a
 * runtime: a fat binary and its kernels registered before main, <<<...>>> launches through the
 * configuration stack and the CUDA 12.4+ kernel handles, and through cudaLaunchKernel; memory,
 * copies of every kind, memsets, streams, events, device queries, and the last-error state.
 * Built against testshim/cuda_runtime_api.h (a test double of NVIDIA's header). */
#include "../tests/check.h"

#include <stdint.h>
#include <string.h>

#include "rt_sim.h"

/* The host stubs nvcc would generate: their addresses identify the kernels. */
static void vector_add_stub(const float *a, const float *b, float *c, int n) { (void)a; (void)b; (void)c; (void)n; }
void unregistered_stub(void) {}
/* The host shadow of `__device__ char counter[16]` (the sim module's global). */
static char counter[16], unregistered_var[4];

/* A <<<grid, block, shared, s>>> launch of fill_u32 as CUDA 12.4+ stubs do it. */
void fill_u32_stub(unsigned *p, unsigned v, int n) {
    static cudaKernel_t handle;
    if (!handle) RT(__cudaGetKernel(&handle, (const void *)fill_u32_stub));
    dim3 g, b;
    size_t shared;
    cudaStream_t s;
    RT(__cudaPopCallConfiguration(&g, &b, &shared, &s));
    void *args[] = {&p, &v, &n};
    RT(__cudaLaunchKernel(handle, g, b, args, shared, s));
}

static unsigned char fat[SIM_FATBIN_SIZE];
static struct {
    int magic, version;
    const void *data, *filename;
} wrapper = {0x466243b1, 1, fat, NULL};

/* What nvcc's module constructor does before main. */
__attribute__((constructor)) static void registration(void) {
    sim_fatbin(fat);
    void **h = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(h, (const char *)fill_u32_stub, (char *)"fill_u32", "fill_u32", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(h, (const char *)vector_add_stub, (char *)"vector_add_f32", "vector_add_f32", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterVar(h, counter, (char *)"counter", "counter", 0, sizeof counter, 0, 0);
    __cudaRegisterFatBinaryEnd(h);
}

int main(void) {
    (void)errname; /* from check.h; this program checks runtime errors */
    int n = 0, dev = -1;
    RT(cudaGetDeviceCount(&n));
    EXPECT(n >= 1);
    EXPECT(cudaSetDevice(n) == cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError() == cudaErrorInvalidDevice && cudaGetLastError() == cudaSuccess);
    RT(cudaSetDevice(0));
    RT(cudaGetDevice(&dev));
    EXPECT(dev == 0);
    struct cudaDeviceProp p;
    RT(cudaGetDeviceProperties(&p, 0));
    int major = 0, warp = 0;
    RT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    RT(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
    EXPECT(p.major == major && p.warpSize == warp && warp == 32 && strlen(p.name) > 0 && p.totalGlobalMem > 0);

    const int N = 1000;
    unsigned *d;
    RT(cudaMalloc((void **)&d, N * 4));
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    cudaEvent_t e0, e1;
    RT(cudaEventCreate(&e0));
    RT(cudaEventCreate(&e1));
    RT(cudaEventRecord(e0, s));
    EXPECT(__cudaPushCallConfiguration((dim3){4, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(d, 0xfeed0001u, N); /* <<<4, 256, 0, s>>> */
    RT(cudaEventRecord(e1, s));
    RT(cudaEventSynchronize(e1));
    float ms = -1;
    RT(cudaEventElapsedTime(&ms, e0, e1));
    EXPECT(ms >= 0);
    unsigned *h;
    RT(cudaMallocHost((void **)&h, N * 4));
    RT(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(h[i] == 0xfeed0001u);

    /* cudaLaunchKernel by host stub, every copy kind. */
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) a[i] = i, b[i] = 2 * i, c[i] = -1;
    float *da, *db, *dc;
    RT(cudaMalloc((void **)&da, sizeof a));
    RT(cudaMalloc((void **)&db, sizeof b));
    RT(cudaMalloc((void **)&dc, sizeof c));
    RT(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
    RT(cudaMemcpy(db, da, sizeof a, cudaMemcpyDeviceToDevice));
    RT(cudaMemcpy(db, b, sizeof b, cudaMemcpyDefault)); /* host to device, told apart by address */
    void *args[] = {&da, &db, &dc, (void *)&N};
    RT(cudaLaunchKernel((const void *)vector_add_stub, (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, 0, NULL));
    RT(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDefault));
    for (int i = 0; i < N; i++) EXPECT(c[i] == 3.0f * i);
    float hh[4] = {1, 2, 3, 4}, hh2[4] = {0};
    RT(cudaMemcpy(hh2, hh, sizeof hh, cudaMemcpyHostToHost));
    EXPECT(hh2[3] == 4);
    RT(cudaMemset(dc, 0, sizeof c));
    RT(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    EXPECT(c[0] == 0 && c[N - 1] == 0);

    /* A host function never registered: an error the next cudaGetLastError reports, once. */
    EXPECT(cudaLaunchKernel((const void *)unregistered_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, NULL) ==
           cudaErrorInvalidResourceHandle);
    cudaKernel_t k;
    EXPECT(__cudaGetKernel(&k, (const void *)unregistered_stub) == cudaErrorInvalidResourceHandle);
    EXPECT(cudaPeekAtLastError() == cudaErrorInvalidResourceHandle);
    EXPECT(cudaGetLastError() == cudaErrorInvalidResourceHandle && cudaGetLastError() == cudaSuccess);
    dim3 g, bl;
    size_t sh;
    cudaStream_t st;
    EXPECT(__cudaPopCallConfiguration(&g, &bl, &sh, &st) == cudaErrorInvalidValue); /* nothing pushed */
    cudaGetLastError();

    /* Device variables by their host shadow. */
    size_t vsize = 0;
    RT(cudaGetSymbolSize(&vsize, counter));
    EXPECT(vsize == 16);
    void *vaddr = NULL;
    RT(cudaGetSymbolAddress(&vaddr, counter));
    EXPECT(vaddr != NULL);
    char in[16], out[16];
    for (int i = 0; i < 16; i++) in[i] = (char)(i + 1);
    RT(cudaMemcpyToSymbol(counter, in, 16, 0, cudaMemcpyHostToDevice));
    RT(cudaMemcpyToSymbolAsync(counter, "ab", 2, 14, cudaMemcpyHostToDevice, s));
    RT(cudaMemcpyFromSymbolAsync(out, counter, 16, 0, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    EXPECT(memcmp(out, in, 14) == 0 && out[14] == 'a' && out[15] == 'b');
    RT(cudaMemcpy(vaddr, in, 4, cudaMemcpyHostToDevice)); /* the address is the variable */
    RT(cudaMemcpyFromSymbol(out, counter, 4, 12, cudaMemcpyDeviceToHost));
    EXPECT(out[0] == 13 && out[2] == 'a');
    EXPECT(cudaMemcpyToSymbol(counter, in, 8, 12, cudaMemcpyHostToDevice) == cudaErrorInvalidValue); /* past its end */
    EXPECT(cudaMemcpyToSymbol(counter, in, 4, 0, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue); /* wrong way */
    EXPECT(cudaMemcpyToSymbol(unregistered_var, in, 4, 0, cudaMemcpyHostToDevice) == 13);     /* cudaErrorInvalidSymbol */
    EXPECT(cudaGetLastError() == 13);

    RT(cudaDeviceSynchronize());
    RT(cudaEventDestroy(e0));
    RT(cudaEventDestroy(e1));
    RT(cudaStreamDestroy(s));
    RT(cudaFreeHost(h));
    RT(cudaFree(d));
    RT(cudaFree(da));
    RT(cudaFree(db));
    RT(cudaFree(dc));
    RT(cudaFree(NULL));

    more_memory(n);
    more_exec();
    more_families();
    printf("rt_sim_test: OK\n");
    return 0;
}

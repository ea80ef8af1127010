/* gpucloud's libcudart beyond the basics, on the simulated backend: pitched 2-D memory, host
 * registration and pointer queries, stream-ordered allocation, copies between devices, host
 * callbacks in stream order, kernel attributes (dynamic shared memory past 48 KiB) and occupancy,
 * device flags, limits and cache preferences, stream and event queries, driver entry points,
 * error names. Each with its error cases. */
#define _GNU_SOURCE
#include "../tests/check.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "rt_sim.h"

/* EXPECT_ERR checks a call failed with want, that the failure is the thread's last error,
 * and clears it. */
#define EXPECT_ERR(call, want)                                                                      \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != (want)) {                                                                         \
            fprintf(stderr, "%s:%d: %s = %d (%s), want %s\n", __FILE__, __LINE__, #call, e_,       \
                    cudaGetErrorName(e_), #want);                                                   \
            exit(1);                                                                                \
        }                                                                                           \
        EXPECT(cudaGetLastError() == (want) && cudaGetLastError() == cudaSuccess);                  \
    } while (0)

/* ---- 2-D ---- */

static void pitched(void) {
    enum { W = 100, H = 8, HP = 128 };
    unsigned char *d, *d2;
    size_t pitch = 0, pitch2 = 0;
    RT(cudaMallocPitch((void **)&d, &pitch, W, H));
    RT(cudaMallocPitch((void **)&d2, &pitch2, W, H));
    EXPECT(pitch >= W && pitch % 256 == 0 && pitch2 == pitch);

    /* The whole surface one value, then a sub-rectangle (columns 10..59, rows 2..5) from host rows
     * of 50 bytes, read back into host rows of HP bytes. */
    RT(cudaMemset2D(d, pitch, 0xab, W, H));
    unsigned char src[4 * 50], out[H * HP];
    for (int i = 0; i < 4 * 50; i++) src[i] = (unsigned char)i;
    RT(cudaMemcpy2D(d + 2 * pitch + 10, pitch, src, 50, 50, 4, cudaMemcpyHostToDevice));
    memset(out, 0x11, sizeof out);
    RT(cudaMemcpy2D(out, HP, d, pitch, W, H, cudaMemcpyDeviceToHost));
    for (int r = 0; r < H; r++)
        for (int c = 0; c < HP; c++) {
            unsigned char want = c >= W ? 0x11 : (r >= 2 && r < 6 && c >= 10 && c < 60) ? (unsigned char)((r - 2) * 50 + c - 10) : 0xab;
            if (out[r * HP + c] != want) {
                fprintf(stderr, "2-D copy: row %d column %d is %#x, want %#x\n", r, c, out[r * HP + c], want);
                exit(1);
            }
        }

    /* Asynchronous on a stream: device to device, a memset over part of it, cudaMemcpyDefault back. */
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 0));
    RT(cudaMemcpy2DAsync(d2, pitch2, d, pitch, W, H, cudaMemcpyDeviceToDevice, s));
    RT(cudaMemset2DAsync(d2 + pitch2, pitch2, 0x5a, 20, 2, s)); /* rows 1..2, columns 0..19 */
    RT(cudaMemcpy2DAsync(out, HP, d2, pitch2, W, H, cudaMemcpyDefault, s));
    RT(cudaStreamSynchronize(s));
    EXPECT(out[0] == 0xab && out[HP + 19] == 0x5a && out[HP + 20] == 0xab && out[2 * HP + 0] == 0x5a);
    EXPECT(out[2 * HP + 20] == 10 && out[3 * HP + 10] == 50 && out[5 * HP + 59] == 199 && out[7 * HP + 99] == 0xab);

    /* Host to host, row by row. */
    unsigned char hh[3 * 8];
    memset(hh, 0, sizeof hh);
    RT(cudaMemcpy2D(hh, 8, src, 50, 5, 3, cudaMemcpyHostToHost));
    EXPECT(hh[0] == 0 && hh[4] == 4 && hh[5] == 0 && hh[8] == 50 && hh[16 + 4] == 104);

    /* A row wider than its pitch; a kind that is none; no pointer for the pitch. */
    EXPECT_ERR(cudaMemcpy2D(out, 50, d, pitch, W, 2, cudaMemcpyDeviceToHost), cudaErrorInvalidPitchValue);
    EXPECT_ERR(cudaMemset2D(d, 64, 0, W, 2), cudaErrorInvalidPitchValue);
    EXPECT_ERR(cudaMemcpy2D(out, HP, d, pitch, W, H, (enum cudaMemcpyKind)9), cudaErrorInvalidValue);
    EXPECT_ERR(cudaMallocPitch((void **)&d, NULL, W, H), cudaErrorInvalidValue);
    RT(cudaStreamDestroy(s));
    RT(cudaFree(d));
    RT(cudaFree(d2));
}

/* ---- host memory and pointer queries ---- */

static void host_memory(void) {
    enum { N = 1 << 16 };
    unsigned *d, *pinned;
    RT(cudaMalloc((void **)&d, N * 4));
    RT(cudaHostAlloc((void **)&pinned, N * 4, 0));
    static unsigned plain[N];

    struct cudaPointerAttributes a;
    RT(cudaPointerGetAttributes(&a, d + 10));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == d + 10);
    RT(cudaPointerGetAttributes(&a, pinned + 5));
    EXPECT(a.type == cudaMemoryTypeHost && a.hostPointer == pinned + 5);
    RT(cudaPointerGetAttributes(&a, plain));
    EXPECT(a.type == cudaMemoryTypeUnregistered);
    EXPECT_ERR(cudaPointerGetAttributes(NULL, d), cudaErrorInvalidValue);

    /* Registration: where the driver offers it (the guest library's comes with shared-memory
     * copies), a registered buffer round-trips and is page-locked memory for pointer queries;
     * where it does not, the call says so rather than pretending. */
    cudaError_t e = cudaHostRegister(plain, sizeof plain, cudaHostRegisterDefault);
    if (e == cudaErrorNotSupported) {
        EXPECT(cudaGetLastError() == cudaErrorNotSupported);
        EXPECT_ERR(cudaHostUnregister(plain), cudaErrorNotSupported);
        unsigned flags;
        EXPECT(cudaHostGetFlags(&flags, pinned) == cudaErrorNotSupported);
        cudaGetLastError();
    } else {
        RT(e);
        for (int i = 0; i < N; i++) plain[i] = 3u * i;
        RT(cudaMemcpy(d, plain, sizeof plain, cudaMemcpyHostToDevice));
        memset(plain, 0, sizeof plain);
        RT(cudaMemcpy(plain, d, sizeof plain, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) EXPECT(plain[i] == 3u * i);
        RT(cudaPointerGetAttributes(&a, plain + 1));
        EXPECT(a.type == cudaMemoryTypeHost);
        unsigned flags = 99;
        e = cudaHostGetFlags(&flags, plain); /* a driver may register without telling flags */
        EXPECT(e == cudaErrorNotSupported || (e == cudaSuccess && flags == cudaHostRegisterDefault));
        cudaGetLastError();
        RT(cudaHostUnregister(plain));
        RT(cudaPointerGetAttributes(&a, plain));
        EXPECT(a.type == cudaMemoryTypeUnregistered);
        EXPECT(cudaHostUnregister(plain) != cudaSuccess); /* no longer registered */
        cudaGetLastError();
    }
    RT(cudaFreeHost(pinned));
    RT(cudaPointerGetAttributes(&a, pinned));
    EXPECT(a.type == cudaMemoryTypeUnregistered);
    RT(cudaFree(d));
}

/* ---- stream-ordered allocation and peers ---- */

static void stream_ordered(int ndev) {
    enum { N = 4096 };
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    unsigned *d, *d2, h[N];
    RT(cudaMallocAsync((void **)&d, N * 4, s));
    RT(cudaMallocAsync((void **)&d2, N * 4, s));
    RT(cudaMemsetAsync(d, 0, N * 4, s));
    EXPECT(__cudaPushCallConfiguration((dim3){16, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(d, 0xc0ffee, N);
    RT(cudaMemcpyPeerAsync(d2, 0, d, 0, N * 4, s));
    RT(cudaFreeAsync(d, s)); /* after the kernel and the copy that read it */
    RT(cudaMemcpyAsync(h, d2, sizeof h, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(h[i] == 0xc0ffee);
    struct cudaPointerAttributes a;
    RT(cudaPointerGetAttributes(&a, d));
    EXPECT(a.type == cudaMemoryTypeUnregistered); /* freed */
    unsigned *d3;
    RT(cudaMalloc((void **)&d3, N * 4));
    RT(cudaMemcpyPeer(d3, 0, d2, 0, N * 4)); /* device 0 to itself */
    memset(h, 0, sizeof h);
    RT(cudaMemcpy(h, d3, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(h[0] == 0xc0ffee && h[N - 1] == 0xc0ffee);
    RT(cudaFree(d3));
    RT(cudaFreeAsync(d2, s));
    RT(cudaFreeAsync(NULL, s));

    int can = -1;
    RT(cudaDeviceCanAccessPeer(&can, 0, 0));
    EXPECT(can == 0);
    EXPECT_ERR(cudaDeviceCanAccessPeer(&can, 0, ndev), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaMemcpyPeer(h, ndev, h, 0, 4), cudaErrorInvalidDevice);
    RT(cudaStreamDestroy(s));
}

/* Copies between two devices (through the host, each side in its device's context), ordered
 * after the work queued before them. */
/* Runtime functions generated over the driver API (apigen/desc/runtime.ann "via"). */
cudaError_t cudaDeviceGetP2PAttribute(int *value, int attr, int srcDevice, int dstDevice);
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId);
cudaError_t cudaCtxResetPersistingL2Cache(void);

static void generated(int ndev) {
    int v = 9;
    RT(cudaCtxResetPersistingL2Cache());
    EXPECT_ERR(cudaDeviceGetP2PAttribute(&v, 2, 0, 0), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaDeviceGetP2PAttribute(&v, 2, 0, ndev), cudaErrorInvalidDevice);
    if (ndev >= 2) {
        RT(cudaDeviceGetP2PAttribute(&v, 2 /* cudaDevP2PAttrAccessSupported */, 0, 1));
        EXPECT(v == 1);
    }
    unsigned long long id = 0;
    EXPECT_ERR(cudaStreamGetId(NULL, &id), cudaErrorNotSupported); /* the simulator does not model it */
}

static void peers(int ndev) {
    generated(ndev);
    if (ndev < 2) return;
    enum { N = (1 << 20) + 4096 }; /* just over 4 MiB: two staging chunks */
    static unsigned h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = 7u * i + 1;
    unsigned *a, *b;
    RT(cudaSetDevice(0));
    RT(cudaMalloc((void **)&a, sizeof h));
    RT(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
    RT(cudaSetDevice(1));
    RT(cudaMalloc((void **)&b, sizeof h));
    RT(cudaMemset(b, 0, sizeof h));
    RT(cudaMemcpyPeer(b, 1, a, 0, sizeof h));
    RT(cudaMemcpy(back, b, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, h, sizeof h) == 0);

    /* On a stream of device 1, after a kernel there that rewrites b. */
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    EXPECT(__cudaPushCallConfiguration((dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(b, 0xabcdu, N);
    RT(cudaMemcpyPeerAsync(a, 0, b, 1, sizeof h, s));
    RT(cudaStreamSynchronize(s));
    RT(cudaStreamDestroy(s));
    RT(cudaFree(b));
    RT(cudaSetDevice(0));
    RT(cudaMemcpy(back, a, sizeof back, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) EXPECT(back[i] == 0xabcdu);
    RT(cudaMemcpyPeer(a, 0, a, 1, 0)); /* nothing to copy */
    int can = -1;
    RT(cudaDeviceCanAccessPeer(&can, 0, 1));
    EXPECT(can == 1);
    RT(cudaDeviceEnablePeerAccess(1, 0));
    EXPECT_ERR(cudaDeviceEnablePeerAccess(1, 0), (cudaError_t)704); /* cudaErrorPeerAccessAlreadyEnabled */
    RT(cudaDeviceDisablePeerAccess(1));
    RT(cudaFree(a));
}

/* Managed and mapped host memory through the runtime, over TCP: kept coherent by the guest
 * library (driver/coherence.c), with the device reporting no concurrent managed access. */
cudaError_t cudaMallocManaged(void **, size_t, unsigned);
cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void *, size_t, unsigned);
static void managed(void) {
    enum { N = 1 << 14 };
    struct cudaDeviceProp p;
    RT(cudaGetDeviceProperties(&p, 0));
    EXPECT(p.concurrentManagedAccess == 0 && p.pageableMemoryAccess == 0);
    unsigned *m;
    RT(cudaMallocManaged((void **)&m, N * 4, 0x01 /* cudaMemAttachGlobal */));
    for (int i = 0; i < N; i++) m[i] = (unsigned)i;
    EXPECT(__cudaPushCallConfiguration((dim3){N / 2 / 256, 1, 1}, (dim3){256, 1, 1}, 0, NULL) == 0);
    fill_u32_stub(m, 0xace, N / 2);
    RT(cudaDeviceSynchronize());
    for (int i = 0; i < N; i++) EXPECT(m[i] == (i < N / 2 ? 0xaceu : (unsigned)i));
    struct cudaPointerAttributes a;
    RT(cudaPointerGetAttributes(&a, m + 3));
    EXPECT(a.type == cudaMemoryTypeManaged);
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    EXPECT_ERR(cudaStreamAttachMemAsync(s, m, 0, 0x08), cudaErrorInvalidValue);
    RT(cudaStreamAttachMemAsync(s, m, 0, 0x04 /* cudaMemAttachSingle */));
    EXPECT(__cudaPushCallConfiguration((dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(m, 0xbee, N);
    RT(cudaStreamSynchronize(s));
    EXPECT(m[0] == 0xbeeu && m[N - 1] == 0xbeeu);
    unsigned *h, *dh;
    RT(cudaHostAlloc((void **)&h, N * 4, 0x02 /* cudaHostAllocMapped */));
    RT(cudaHostGetDevicePointer((void **)&dh, h, 0));
    EXPECT(dh == h); /* as on a unified address space */
    RT(cudaPointerGetAttributes(&a, h + 5));
    EXPECT(a.type == cudaMemoryTypeHost && a.devicePointer == h + 5 && a.hostPointer == h + 5);
    EXPECT(__cudaPushCallConfiguration((dim3){N / 256, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(dh, 0xcab, N);
    RT(cudaStreamSynchronize(s));
    EXPECT(h[0] == 0xcabu && h[N - 1] == 0xcabu);
    RT(cudaFreeHost(h));
    RT(cudaFree(m));
    RT(cudaStreamDestroy(s));
}

/* A fat binary's managed variable as nvcc registers it (`__managed__ unsigned counted = 5;`):
 * the program's code reads and writes it through the pointer __cudaInitModule sets, which is the
 * variable's device address, kept coherent by the guest library (driver/coherence.c). */
void __cudaRegisterManagedVar(void **, void **, char *, const char *, int, size_t, int, int);
char __cudaInitModule(void **);
static const char managed_image[] = "GPUSIM-MODULE 1\nglobal counted 4 managed 5\n";
static struct {
    int magic, version;
    const void *data, *filename;
} managed_wrapper = {0x466243b1, 1, managed_image, NULL};
static void **managed_fatbin;
static unsigned *counted; /* nvcc's pointer to the variable */

__attribute__((constructor)) static void register_managed(void) {
    managed_fatbin = __cudaRegisterFatBinary(&managed_wrapper);
    __cudaRegisterManagedVar(managed_fatbin, (void **)&counted, (char *)"counted", "counted", 0, 4, 0, 0);
    __cudaRegisterFatBinaryEnd(managed_fatbin);
}

static void managed_variable(void) {
    EXPECT(counted == NULL);
    EXPECT(__cudaInitModule(managed_fatbin) == 1);
    EXPECT(counted != NULL && *counted == 5); /* the module's initial value */
    *counted += 2;
    void *dev;
    RT(cudaGetSymbolAddress(&dev, counted)); /* its symbol is its address */
    EXPECT(dev == counted);
    unsigned v = 0;
    RT(cudaMemcpyFromSymbol(&v, counted, 4, 0, cudaMemcpyDeviceToHost));
    EXPECT(v == 7); /* the host's write reached the device */
    EXPECT(__cudaPushCallConfiguration((dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, NULL) == 0);
    fill_u32_stub(counted, 40, 1);
    RT(cudaDeviceSynchronize());
    EXPECT(*counted == 40);
}

void more_memory(int ndev) {
    (void)errname;
    pitched();
    host_memory();
    stream_ordered(ndev);
    peers(ndev);
    managed();
    managed_variable();
}

/* ---- host callbacks in stream order ---- */

struct order {
    cudaStream_t stream;
    unsigned *h, *h2;
    int n, calls, saw_copy;
    cudaError_t status;
};

/* after_copy runs after an asynchronous device-to-host copy queued before it: it must see the
 * copied data, and what it writes must be what a host-to-device copy queued after it sends. */
static void after_copy(void *p) {
    struct order *o = p;
    o->saw_copy = 1;
    for (int i = 0; i < o->n; i++) o->saw_copy &= o->h[i] == 0xfeedu;
    for (int i = 0; i < o->n; i++) o->h2[i] = 0xbeefu + (unsigned)i;
    o->calls++;
}

static void callback(cudaStream_t s, cudaError_t status, void *p) {
    struct order *o = p;
    o->stream = s;
    o->status = status;
    o->calls++;
}

static void host_functions(void) {
    enum { N = 1 << 14 };
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, 1));
    unsigned *d, *h, *h2;
    RT(cudaMalloc((void **)&d, N * 4));
    RT(cudaMallocHost((void **)&h, N * 4));
    RT(cudaMallocHost((void **)&h2, N * 4));
    struct order o = {.h = h, .h2 = h2, .n = N};
    EXPECT(__cudaPushCallConfiguration((dim3){64, 1, 1}, (dim3){256, 1, 1}, 0, s) == 0);
    fill_u32_stub(d, 0xfeedu, N);
    RT(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s));
    RT(cudaLaunchHostFunc(s, after_copy, &o));
    RT(cudaMemcpyAsync(d, h2, N * 4, cudaMemcpyHostToDevice, s));
    RT(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    EXPECT(o.calls == 1 && o.saw_copy);
    for (int i = 0; i < N; i++) EXPECT(h[i] == 0xbeefu + (unsigned)i);

    /* The same on the legacy default stream, and a stream callback told the stream and status. */
    o.calls = 0;
    EXPECT(__cudaPushCallConfiguration((dim3){64, 1, 1}, (dim3){256, 1, 1}, 0, NULL) == 0);
    fill_u32_stub(d, 0xfeedu, N);
    RT(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, NULL));
    RT(cudaLaunchHostFunc(NULL, after_copy, &o));
    RT(cudaDeviceSynchronize());
    EXPECT(o.calls == 1 && o.saw_copy);
    o.calls = 0;
    o.status = cudaErrorUnknown;
    RT(cudaStreamAddCallback(s, callback, &o, 0));
    EXPECT(o.calls == 1 && o.stream == s && o.status == cudaSuccess);
    EXPECT_ERR(cudaStreamAddCallback(s, callback, &o, 1), cudaErrorInvalidValue); /* flags must be 0 */
    EXPECT_ERR(cudaLaunchHostFunc(s, NULL, &o), cudaErrorInvalidValue);
    EXPECT(o.calls == 1);
    RT(cudaFreeHost(h));
    RT(cudaFreeHost(h2));
    RT(cudaFree(d));
    RT(cudaStreamDestroy(s));
}

/* ---- kernel attributes and occupancy ---- */

static void kernel_attributes(void) {
    enum { N = 1024, BIG = 64 * 1024 };
    unsigned *d, h[N];
    int n = N;
    RT(cudaMalloc((void **)&d, sizeof h));
    void *args[] = {&d, (void *)(unsigned[]){7}, &n};
    struct cudaFuncAttributes fa;
    RT(cudaFuncGetAttributes(&fa, (const void *)fill_u32_stub));
    EXPECT(fa.maxDynamicSharedSizeBytes == 48 * 1024 && fa.maxThreadsPerBlock >= 256 && fa.numRegs > 0);

    /* Past 48 KiB of dynamic shared memory a launch fails until the kernel's limit is raised (a
     * real GPU refuses the launch itself, gpucloud's asynchronous launch at the next sync). */
    cudaError_t e = cudaLaunchKernel((const void *)fill_u32_stub, (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, BIG, NULL);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorInvalidValue);
    cudaGetLastError();
    RT(cudaFuncSetAttribute((const void *)fill_u32_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, BIG));
    RT(cudaFuncGetAttributes(&fa, (const void *)fill_u32_stub));
    EXPECT(fa.maxDynamicSharedSizeBytes == BIG);
    RT(cudaMemset(d, 0, sizeof h));
    RT(cudaLaunchKernel((const void *)fill_u32_stub, (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, BIG, NULL));
    RT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) EXPECT(h[i] == 7);
    EXPECT_ERR(cudaFuncSetAttribute((const void *)fill_u32_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaFuncSetAttribute((const void *)fill_u32_stub, (enum cudaFuncAttribute)0, 1), cudaErrorInvalidValue);
    EXPECT_ERR(cudaFuncSetAttribute((const void *)unregistered_stub, cudaFuncAttributeMaxDynamicSharedMemorySize, BIG),
               cudaErrorInvalidResourceHandle);

    /* A cache preference is the shared-memory carveout. */
    RT(cudaFuncSetCacheConfig((const void *)fill_u32_stub, cudaFuncCachePreferShared));
    RT(cudaFuncGetAttributes(&fa, (const void *)fill_u32_stub));
    EXPECT(fa.preferredShmemCarveout == 100);
    RT(cudaFuncSetCacheConfig((const void *)fill_u32_stub, cudaFuncCachePreferL1));
    RT(cudaFuncGetAttributes(&fa, (const void *)fill_u32_stub));
    EXPECT(fa.preferredShmemCarveout == 0);
    EXPECT_ERR(cudaFuncSetCacheConfig((const void *)fill_u32_stub, (enum cudaFuncCache)7), cudaErrorInvalidValue);

    /* Occupancy: bounded by threads per multiprocessor, and lower with 64 KiB of shared memory. */
    struct cudaDeviceProp p;
    RT(cudaGetDeviceProperties(&p, 0));
    int blocks = 0, big = 0;
    RT(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)fill_u32_stub, 256, 0));
    EXPECT(blocks >= 1 && blocks * 256 <= p.maxThreadsPerMultiProcessor);
    RT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&big, (const void *)fill_u32_stub, 256, BIG, 0));
    EXPECT(big >= 1 && big < blocks && (size_t)big * BIG <= p.sharedMemPerMultiprocessor);
    EXPECT((size_t)blocks * 256 * fa.numRegs <= (size_t)p.regsPerMultiprocessor && p.sharedMemPerBlockOptin >= BIG);
    EXPECT_ERR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)fill_u32_stub, 0, 0),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)unregistered_stub, 256, 0),
               cudaErrorInvalidResourceHandle);
    RT(cudaFree(d));
}

/* ---- device flags, limits, cache preference ---- */

static void device_state(void) {
    RT(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    unsigned flags = 0;
    RT(cudaGetDeviceFlags(&flags));
    EXPECT((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync);
    RT(cudaSetDeviceFlags(cudaDeviceScheduleAuto));
    EXPECT_ERR(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield), cudaErrorInvalidValue);
    EXPECT_ERR(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue);

    /* Limits and the context's cache preference, kept by the session's context. */
    size_t stack = 0, heap = 0;
    RT(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    EXPECT(stack > 0);
    RT(cudaDeviceSetLimit(cudaLimitStackSize, stack + 4096));
    RT(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 << 20));
    RT(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    RT(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(stack >= 4096 && heap == 64 << 20);
    EXPECT_ERR(cudaDeviceGetLimit(&stack, (enum cudaLimit)77), cudaErrorUnsupportedLimit);
    EXPECT_ERR(cudaDeviceGetLimit(NULL, cudaLimitStackSize), cudaErrorInvalidValue);
    enum cudaFuncCache c = cudaFuncCachePreferL1;
    RT(cudaDeviceGetCacheConfig(&c));
    EXPECT(c == cudaFuncCachePreferNone);
    RT(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    RT(cudaDeviceGetCacheConfig(&c));
    EXPECT(c == cudaFuncCachePreferShared);
    EXPECT_ERR(cudaDeviceSetCacheConfig((enum cudaFuncCache)9), cudaErrorInvalidValue);
    RT(cudaDeviceGetCacheConfig(&c));
    EXPECT(c == cudaFuncCachePreferShared); /* a refused setting changes nothing */
}

/* ---- streams, events, entry points, errors ---- */

static void queries(void) {
    cudaError_t e;
    cudaStream_t s, t;
    RT(cudaStreamCreateWithFlags(&s, 1));
    RT(cudaStreamCreateWithPriority(&t, 0, -1));
    unsigned flags = 9;
    RT(cudaStreamGetFlags(s, &flags));
    EXPECT(flags == 1);
    RT(cudaStreamGetFlags(t, &flags));
    EXPECT(flags == 0);
    RT(cudaStreamGetFlags(NULL, &flags));
    EXPECT(flags == 0);
    int least = 9, greatest = 9, prio = 9;
    RT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    RT(cudaStreamGetPriority(t, &prio));
    EXPECT(greatest <= least && prio >= greatest && prio <= least); /* clamped into the range */
    EXPECT_ERR(cudaStreamGetFlags(s, NULL), cudaErrorInvalidValue);

    cudaEvent_t a, b;
    RT(cudaEventCreate(&a));
    RT(cudaEventCreate(&b));
    RT(cudaEventRecordWithFlags(a, s, cudaEventRecordDefault));
    RT(cudaEventRecordWithFlags(b, s, cudaEventRecordExternal));
    RT(cudaEventSynchronize(b));
    float ms = -1;
    RT(cudaEventElapsedTime(&ms, a, b));
    EXPECT(ms >= 0);
    EXPECT_ERR(cudaEventRecordWithFlags(a, s, 2), cudaErrorInvalidValue);
    RT(cudaEventDestroy(a));
    RT(cudaEventDestroy(b));
    RT(cudaStreamDestroy(s));
    RT(cudaStreamDestroy(t));

    /* A driver entry point through the runtime is the driver's own function. */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && fn == (void *)cuMemAlloc_v2);
    CUdeviceptr p = 0;
    CHECK(((CUresult(*)(CUdeviceptr *, size_t))fn)(&p, 256));
    EXPECT(p != 0);
    CHECK(cuMemFree(p));
    RT(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && fn == (void *)cuMemFree_v2);
    fn = (void *)1;
    e = cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, 0, &st);
    EXPECT(e != cudaSuccess && st == cudaDriverEntryPointSymbolNotFound && fn == NULL);
    cudaGetLastError();
    /* A function the driver refuses resolves to its stub, as the driver's own table has it. */
    RT(cudaGetDriverEntryPointByVersion("cuLaunchGrid", &fn, 12000, 0, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && fn == dlsym(RTLD_DEFAULT, "cuLaunchGrid"));

    RT(cudaProfilerStart());
    RT(cudaProfilerStop());

    /* The runtime's error names, not the driver's. */
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorNotSupported), "cudaErrorNotSupported") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidResourceHandle), "cudaErrorInvalidResourceHandle") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidPitchValue), "cudaErrorInvalidPitchValue") == 0);
    EXPECT(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0);
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)4242), "unrecognized error code") == 0);
    EXPECT(strcmp(cudaGetErrorString(cudaErrorInvalidPitchValue), "invalid pitch argument") == 0);
    /* A stream capture's errors (900 unsupported, 906 implicit, 907 captured event; the H100 run's
     * graph case said only "unrecognized error code"), and 708, whose runtime name differs. */
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)900), "cudaErrorStreamCaptureUnsupported") == 0);
    EXPECT(strcmp(cudaGetErrorString((cudaError_t)906),
                  "operation would make the legacy stream depend on a capturing blocking stream") == 0);
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)907), "cudaErrorCapturedEvent") == 0);
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)708), "cudaErrorSetOnActiveProcess") == 0);
}

void more_exec(void) {
    host_functions();
    kernel_attributes();
    device_state();
    queries();
}

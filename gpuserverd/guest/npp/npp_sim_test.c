/* npp_sim_test: gpucloud's NPP libraries over the guest libcuda and a real gpuserverd on the
 * simulated backend (guesttest/npp_test.go): NPP's version, an image allocated by nppiMalloc, set
 * (nppiSet), added with result scaling (nppiAdd ... Sfs) and box-filtered, each on a stream named
 * by an NppStreamContext and checked against the CPU; a buffer size answered into host memory; a
 * host array written by the server (nppiEvenLevelsHost, staged); a stream context naming no stream
 * of the session refused; a remoted function the simulated backend does not compute answering
 * NPP_NOT_SUPPORTED_MODE_ERROR; a function that is not remoted, called twice. With "foreign" it only
 * checks that a call fails over another libcuda. Declares what it uses (CI has no npp.h). */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "gc_test_check.h"

typedef struct {
    int width, height;
} NppiSize;
typedef struct {
    int x, y;
} NppiPoint;
typedef struct {
    int major, minor, build;
} NppLibraryVersion;
typedef struct {
    void *hStream;
    int nCudaDeviceId, nMultiProcessorCount, nMaxThreadsPerMultiProcessor, nMaxThreadsPerBlock;
    size_t nSharedMemPerBlock;
    int nCudaDevAttrComputeCapabilityMajor, nCudaDevAttrComputeCapabilityMinor;
    unsigned int nStreamFlags;
    int nReserved0;
} NppStreamContext;
enum { NOT_SUPPORTED = -9999, KERNEL_ERROR = -1000, NULL_POINTER = -8 };

const NppLibraryVersion *nppGetLibVersion(void);
uint8_t *nppiMalloc_8u_C1(int w, int h, int *step);
void nppiFree(void *p);
float *nppsMalloc_32f(size_t n);
void nppsFree(void *p);
int nppiSet_8u_C1R_Ctx(const uint8_t v, uint8_t *dst, int step, NppiSize roi, NppStreamContext ctx);
int nppiAdd_8u_C1RSfs_Ctx(const uint8_t *a, int sa, const uint8_t *b, int sb, uint8_t *dst, int sd, NppiSize roi, int scale,
                          NppStreamContext ctx);
int nppiFilterBox_8u_C1R_Ctx(const uint8_t *src, int ss, uint8_t *dst, int sd, NppiSize roi, NppiSize mask, NppiPoint anchor,
                             NppStreamContext ctx);
int nppiAbsDiff_8u_C1R_Ctx(const uint8_t *a, int sa, const uint8_t *b, int sb, uint8_t *dst, int sd, NppiSize roi,
                           NppStreamContext ctx);
int nppiSegmentWatershedGetBufferSize_8u_C1R(NppiSize roi, size_t *size);
int nppiEvenLevelsHost_32s(int32_t *levels, int n, int32_t lo, int32_t hi);
int nppiFloodFill_8u_C1IR_Ctx(uint8_t *img, int step, NppiPoint seed, uint8_t v, int norm, NppiSize roi, void *region,
                              uint8_t *buf, NppStreamContext ctx);

enum { W = 37, H = 11 };

static void fetch(uint8_t *host, const uint8_t *dev, int step) {
    CU(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = (CUdeviceptr)(uintptr_t)dev,
                                   .srcPitch = (size_t)step, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = host,
                                   .dstPitch = W, .WidthInBytes = W, .Height = H}));
}

static void store(uint8_t *dev, int step, const uint8_t *host) {
    CU(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = W,
                                   .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = (CUdeviceptr)(uintptr_t)dev,
                                   .dstPitch = (size_t)step, .WidthInBytes = W, .Height = H}));
}

int main(int argc, char **argv) {
    NppiSize roi = {W, H};
    NppStreamContext ctx;
    memset(&ctx, 0, sizeof ctx);
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        size_t sz = 0;
        CHECK(nppiSegmentWatershedGetBufferSize_8u_C1R(roi, &sz) == KERNEL_ERROR);
        printf("npp_sim_test foreign: OK\n");
        return 0;
    }
    const NppLibraryVersion *v = nppGetLibVersion();
    CHECK(v && v->major == 13);
    GC_TEST_CONTEXT();
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    ctx.hStream = s;

    int sa = 0, sb = 0, sd = 0;
    uint8_t *a = nppiMalloc_8u_C1(W, H, &sa), *b = nppiMalloc_8u_C1(W, H, &sb), *d = nppiMalloc_8u_C1(W, H, &sd);
    CHECK(a && b && d && sa >= W && sb >= W && sd >= W);
    CHECK(nppiMalloc_8u_C1(0, H, &sa) == NULL);

    /* nppiSet on the program's stream */
    OK(nppiSet_8u_C1R_Ctx(7, a, sa, roi, ctx));
    CU(cuStreamSynchronize(s));
    uint8_t host[H][W], want[H][W];
    fetch(&host[0][0], a, sa);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) CHECK(host[y][x] == 7);

    /* (a + b) / 2, rounded half to even: 7 + 4 = 11 -> 5.5 -> 6; 7 + 2 = 9 -> 4.5 -> 4 */
    uint8_t bh[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) bh[y][x] = (uint8_t)((x + y) % 2 ? 4 : 2);
    store(b, sb, &bh[0][0]);
    OK(nppiAdd_8u_C1RSfs_Ctx(a, sa, b, sb, d, sd, roi, 1, ctx));
    CU(cuStreamSynchronize(s));
    fetch(&host[0][0], d, sd);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) CHECK(host[y][x] == ((x + y) % 2 ? 6 : 4));

    /* a 3x3 box filter of the inner (W-2)x(H-2) pixels of b, the anchor at the mask's centre */
    NppiSize inner = {W - 2, H - 2};
    OK(nppiSet_8u_C1R_Ctx(0, d, sd, roi, ctx));
    OK(nppiFilterBox_8u_C1R_Ctx(b + sb + 1, sb, d + sd + 1, sd, inner, (NppiSize){3, 3}, (NppiPoint){1, 1}, ctx));
    CU(cuStreamSynchronize(s));
    fetch(&host[0][0], d, sd);
    memset(want, 0, sizeof want);
    for (int y = 1; y < H - 1; y++)
        for (int x = 1; x < W - 1; x++) {
            int sum = 0;
            for (int j = -1; j <= 1; j++)
                for (int i = -1; i <= 1; i++) sum += bh[y + j][x + i];
            want[y][x] = (uint8_t)((sum + 4) / 9);
        }
    CHECK(memcmp(host, want, sizeof want) == 0);

    /* a buffer size answered into the program's memory; NULL refused before the wire */
    size_t bytes = 0;
    OK(nppiSegmentWatershedGetBufferSize_8u_C1R(roi, &bytes));
    CHECK(bytes == 8 * W * H); /* the simulated backend's */
    CHECK(nppiSegmentWatershedGetBufferSize_8u_C1R(roi, NULL) == NULL_POINTER);

    /* a host array NVIDIA's function writes, staged through device memory */
    int32_t levels[5] = {0};
    OK(nppiEvenLevelsHost_32s(levels, 5, 0, 256));
    CHECK(levels[0] == 0 && levels[1] == 64 && levels[2] == 128 && levels[3] == 192 && levels[4] == 256);

    /* a stream context naming no stream of this session */
    NppStreamContext bad = ctx;
    bad.hStream = (void *)(uintptr_t)0x7777700;
    CHECK(nppiSet_8u_C1R_Ctx(1, a, sa, roi, bad) != 0);

    /* remoted, not computed by the simulated backend; and not remoted at all (said once) */
    CHECK(nppiAbsDiff_8u_C1R_Ctx(a, sa, b, sb, d, sd, roi, ctx) == NOT_SUPPORTED);
    for (int i = 0; i < 2; i++)
        CHECK(nppiFloodFill_8u_C1IR_Ctx(a, sa, (NppiPoint){0, 0}, 1, 0, roi, NULL, NULL, ctx) == NOT_SUPPORTED);

    float *sig = nppsMalloc_32f(64);
    CHECK(sig != NULL);
    nppsFree(sig);
    nppiFree(a);
    nppiFree(b);
    nppiFree(d);
    CU(cuStreamDestroy(s));
    printf("npp_sim_test: OK\n");
    return 0;
}

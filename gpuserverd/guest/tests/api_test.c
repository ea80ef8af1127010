/* Exercises every family of the driver API the guest library forwards, against a gpuserverd on
 * the simulated backend. Prints "api_test: OK" when all checks pass. */
#include "check.h"

#include <string.h>
#include <unistd.h>

static void devices(void) {
    int v = 0, n = 0, major = 0, minor = 0, attr = 0;
    CHECK(cuDriverGetVersion(&v));
    EXPECT(v >= 12000);
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == 1);
    CUdevice d;
    CHECK(cuDeviceGet(&d, 0));
    EXPECT_RC(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    char name[128];
    CHECK(cuDeviceGetName(name, sizeof name, 0));
    EXPECT(strstr(name, "Simulated") != NULL);
    CUuuid u;
    CHECK(cuDeviceGetUuid(&u, 0));
    EXPECT(u.bytes[0] == 0x51 && (unsigned char)u.bytes[1] == 0xa1);
    size_t total = 0;
    CHECK(cuDeviceTotalMem(&total, 0));
    EXPECT(total > 0);
    CHECK(cuDeviceComputeCapability(&major, &minor, 0));
    EXPECT(major == 9 && minor == 0);
    CHECK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    EXPECT(attr == 32);
    CHECK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    EXPECT(attr == 9);
    EXPECT_RC(cuDeviceGetAttribute(&attr, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
    char pci[32];
    CHECK(cuDeviceGetPCIBusId(pci, sizeof pci, 0));
    EXPECT(strchr(pci, ':') != NULL);
}

static void contexts(CUcontext *primary) {
    CUcontext c = NULL, popped = NULL, cur = NULL;
    CUdevice d = -1;
    EXPECT_RC(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT); /* nothing current yet */
    CHECK(cuCtxCreate(&c, 0, 0));
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == c);
    CHECK(cuCtxGetDevice(&d));
    EXPECT(d == 0);
    CHECK(cuCtxPopCurrent(&popped));
    EXPECT(popped == c);
    CHECK(cuCtxPushCurrent(c));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy(c));
    CHECK(cuDevicePrimaryCtxRetain(primary, 0));
    unsigned flags;
    int active;
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    EXPECT(active == 1);
    CHECK(cuCtxSetCurrent(*primary));
}

static void memory(void) {
    size_t free0, total;
    CHECK(cuMemGetInfo(&free0, &total));
    EXPECT(free0 <= total && total > 0);
    /* 10 MiB crosses several 4 MiB chunks each way. */
    size_t n = 10 << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, n));
    CHECK(cuMemAlloc(&b, n));
    EXPECT(a >= 0x10000 && a != b);
    size_t free1;
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 + 2 * n <= free0);
    CHECK(cuMemcpyHtoD(a, h, n));
    CHECK(cuMemcpyDtoD(b, a, n));
    memset(back, 0, n);
    CHECK(cuMemcpyDtoH(back, b, n));
    EXPECT(memcmp(h, back, n) == 0);
    CUdeviceptr base;
    size_t size;
    CHECK(cuMemGetAddressRange(&base, &size, a + 100));
    EXPECT(base == a && size == n);

    /* Memsets, all widths. */
    CHECK(cuMemsetD8(a, 0xab, 3));
    CHECK(cuMemsetD16(a + 4, 0x1234, 2));
    CHECK(cuMemsetD32(a + 8, 0xdeadbeef, 1));
    unsigned char m[12];
    CHECK(cuMemcpyDtoH(m, a, 12));
    EXPECT(m[0] == 0xab && m[2] == 0xab && m[3] == (unsigned char)(3 * 7 + 3));
    EXPECT(m[4] == 0x34 && m[5] == 0x12 && m[6] == 0x34 && m[8] == 0xef && m[11] == 0xde);

    /* Pinned host memory and async forms on a stream. */
    void *pin;
    CHECK(cuMemAllocHost(&pin, 1 << 20));
    void *pin2;
    CHECK(cuMemHostAlloc(&pin2, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
    memset(pin, 0x5a, 1 << 20);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemcpyHtoDAsync(a, pin, 1 << 20, s));
    CHECK(cuMemsetD32Async(a, 0x01020304, 4, s));
    CHECK(cuMemsetD16Async(a + 16, 0xffff, 1, s));
    CHECK(cuMemsetD8Async(a + 18, 0x77, 1, s));
    CHECK(cuMemcpyDtoDAsync(b, a, 1 << 20, s));
    CHECK(cuMemcpyDtoHAsync(pin2, b, 1 << 20, s));
    CHECK(cuStreamSynchronize(s));
    unsigned char *p2 = pin2;
    EXPECT(p2[0] == 4 && p2[3] == 1 && p2[16] == 0xff && p2[18] == 0x77 && p2[19] == 0x5a && p2[(1 << 20) - 1] == 0x5a);

    /* cuMemcpy tells device from host pointers by the allocations. */
    unsigned char hs[64], hd[64];
    memset(hs, 9, sizeof hs);
    CHECK(cuMemcpy(a, (CUdeviceptr)(uintptr_t)hs, sizeof hs));
    CHECK(cuMemcpyAsync(b, a, sizeof hs, s));
    CHECK(cuStreamSynchronize(s)); /* s is non-blocking: the default stream does not wait for it */
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)hd, b, sizeof hd));
    EXPECT(memcmp(hs, hd, sizeof hs) == 0);

    /* A copy outside any allocation is refused, not run. */
    EXPECT_RC(cuMemcpyHtoD(a + n - 2, h, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFreeHost(pin));
    CHECK(cuMemFreeHost(pin2));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    EXPECT_RC(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    free(h);
    free(back);
}

/* A 3x4-byte block out of a pitched host image, into a pitched device buffer and back. */
static void copies_2d(void) {
    unsigned char img[5][16], back[5][16];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 16; c++) img[r][c] = (unsigned char)(r * 16 + c);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64 * 4));
    CHECK(cuMemsetD2D32(d, 64, 0x01010101, 16, 4)); /* 4 rows of 64 bytes */
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = img;
    c.srcPitch = 16;
    c.srcXInBytes = 2;
    c.srcY = 1;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = d;
    c.dstPitch = 64;
    c.dstXInBytes = 8;
    c.WidthInBytes = 4;
    c.Height = 3;
    CHECK(cuMemcpy2D(&c));
    unsigned char dev[4][64];
    CHECK(cuMemcpyDtoH(dev, d, sizeof dev));
    EXPECT(dev[0][8] == img[1][2] && dev[2][11] == img[3][5] && dev[0][7] == 1 && dev[0][12] == 1 && dev[3][8] == 1);
    /* And back through the unified form, asynchronously. */
    memset(back, 0, sizeof back);
    CUDA_MEMCPY2D b = {0};
    b.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    b.srcDevice = d;
    b.srcPitch = 64;
    b.srcXInBytes = 8;
    b.dstMemoryType = CU_MEMORYTYPE_HOST;
    b.dstHost = back;
    b.dstPitch = 16;
    b.WidthInBytes = 4;
    b.Height = 3;
    CHECK(cuMemcpy2DAsync(&b, NULL));
    CHECK(cuCtxSynchronize());
    EXPECT(back[0][0] == img[1][2] && back[2][3] == img[3][5] && back[0][4] == 0);
    CHECK(cuMemsetD2D8Async(d, 64, 0xee, 2, 2, NULL));
    CHECK(cuMemsetD2D16(d + 32, 64, 0xabcd, 1, 2));
    CHECK(cuMemcpyDtoH(dev, d, sizeof dev));
    EXPECT(dev[1][1] == 0xee && dev[1][2] == 1 && dev[2][0] == 1 && dev[1][32] == 0xcd && dev[1][33] == 0xab);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    EXPECT_RC(cuMemcpy2D(&c), CUDA_ERROR_INVALID_HANDLE); /* an array side naming no array (driver/array.c) */
    CHECK(cuMemFree(d));
}

static void put_f(float *dst, int n, float base) {
    for (int i = 0; i < n; i++) dst[i] = base + (float)i;
}

/* Dynamic shared memory that only blocks of 512 threads or fewer can have (the default limit is
 * 48 KiB): the suggestion must come from the callback, not from dynamicSMemSize. */
static size_t half_blocks_only(int block) { return block > 512 ? (size_t)1 << 20 : 0; }

/* cuOccupancyMaxPotentialBlockSize as NVIDIA documents it, over the simulated H100 (64 warps and
 * 32 blocks a multiprocessor): a full multiprocessor with 1024 threads a block; with a limit of 100
 * threads, 64 (32 blocks fill it, where 100 or 96 leave warps idle); with the callback, 512. */
static void potential_block_size(CUfunction f) {
    CUdevice dev;
    int sms, grid = -1, block = -1;
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    EXPECT(block == 1024 && grid == 2 * sms);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 100));
    EXPECT(block == 64 && grid == 32 * sms);
    CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, half_blocks_only, 1 << 30, 0, CU_OCCUPANCY_DEFAULT));
    EXPECT(block == 512 && grid == 4 * sms);
    /* dynamicSMemSize alone too big for any block: no suggestion, as NVIDIA answers (0, 0). */
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, (size_t)1 << 20, 0));
    EXPECT(block == 0 && grid == 0);
    EXPECT_RC(cuOccupancyMaxPotentialBlockSize(NULL, &block, f, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

static void modules_and_launches(void) {
    CUmodule mod;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CUfunction add, saxpy, matmul, bogus;
    CHECK(cuModuleGetFunction(&add, mod, "vector_add_f32"));
    CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy_f32"));
    CHECK(cuModuleGetFunction(&matmul, mod, "matmul_f32"));
    EXPECT_RC(cuModuleGetFunction(&bogus, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    int threads;
    CHECK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
    EXPECT(threads == 1024);
    potential_block_size(add);
    CUdeviceptr g;
    size_t gsize;
    CHECK(cuModuleGetGlobal(&g, &gsize, mod, "counter"));
    EXPECT(gsize == 16);
    CHECK(cuMemsetD32(g, 7, 4));

    enum { N = 1000 };
    float a[N], b[N], c[N];
    put_f(a, N, 1);
    put_f(b, N, 100);
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, sizeof a));
    CHECK(cuMemAlloc(&db, sizeof b));
    CHECK(cuMemAlloc(&dc, sizeof c));
    CHECK(cuMemcpyHtoD(da, a, sizeof a));
    CHECK(cuMemcpyHtoD(db, b, sizeof b));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++) EXPECT(c[i] == a[i] + b[i]);

    /* The same launch through CU_LAUNCH_PARAM_BUFFER_POINTER: y = 2x + y on the first 100. */
    struct {
        float alpha;
        int pad;
        CUdeviceptr x, y;
        int n;
    } __attribute__((packed)) buf = {2.0f, 0, da, dc, 100};
    size_t bsize = 28;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bsize, CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(saxpy, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, sizeof c));
    EXPECT(c[0] == 2 * a[0] + a[0] + b[0] && c[99] == 2 * a[99] + a[99] + b[99] && c[100] == a[100] + b[100]);

    /* A 2x3 by 3x2 matrix product. */
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {7, 8, 9, 10, 11, 12}, C[4];
    CHECK(cuMemcpyHtoD(da, A, sizeof A));
    CHECK(cuMemcpyHtoD(db, B, sizeof B));
    int M = 2, Nn = 2, K = 3;
    void *margs[] = {&da, &db, &dc, &M, &Nn, &K};
    CHECK(cuLaunchKernel(matmul, 1, 1, 1, 16, 16, 1, 0, NULL, margs, NULL));
    CHECK(cuMemcpyDtoH(C, dc, sizeof C));
    EXPECT(C[0] == 58 && C[1] == 64 && C[2] == 139 && C[3] == 154);

    /* Other loaders: Ex, fat binary (wrapped), file, PTX, and the cuLibrary family. */
    /* A cubin-shaped ELF whose section data lies after its section header table: the library
     * must send the whole image, not stop at the table. */
    static unsigned char elf[128 + sizeof sim_image];
    unsigned long long shoff = 64, soff = 128, ssize = sizeof sim_image;
    unsigned short shentsize = 64, shnum = 1;
    unsigned stype = 1; /* SHT_PROGBITS */
    memcpy(elf, "\x7f" "ELF\x02\x01\x01", 7);
    memcpy(elf + 0x28, &shoff, 8);
    memcpy(elf + 0x3a, &shentsize, 2);
    memcpy(elf + 0x3c, &shnum, 2);
    memcpy(elf + 64 + 4, &stype, 4);
    memcpy(elf + 64 + 0x18, &soff, 8);
    memcpy(elf + 64 + 0x20, &ssize, 8);
    memcpy(elf + 128, sim_image, sizeof sim_image);
    CUmodule me;
    CUfunction fe;
    CHECK(cuModuleLoadData(&me, elf));
    CHECK(cuModuleGetFunction(&fe, me, "saxpy_f32"));
    CHECK(cuModuleUnload(me));

    CUmodule m2, m3, m4, m5;
    CHECK(cuModuleLoadDataEx(&m2, sim_image, 0, NULL, NULL));
    static unsigned char fat[SIM_FATBIN_SIZE];
    sim_fatbin(fat);
    struct {
        int magic, version;
        const void *data, *filename;
    } wrapper = {0x466243b1, 1, fat, NULL};
    CHECK(cuModuleLoadFatBinary(&m3, &wrapper));
    CUfunction f3;
    CHECK(cuModuleGetFunction(&f3, m3, "fill_u32"));
    char path[] = "/tmp/gpucloud-module-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0 && write(fd, sim_image, strlen(sim_image)) == (ssize_t)strlen(sim_image));
    close(fd);
    CHECK(cuModuleLoad(&m4, path));
    EXPECT_RC(cuModuleLoad(&m5, "/nonexistent/module.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
    const char *ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry fill_u32(\n) { ret; }\n";
    CHECK(cuModuleLoadData(&m5, ptx));
    CUfunction fill;
    CHECK(cuModuleGetFunction(&fill, m5, "fill_u32"));
    unsigned v = 0xcafe;
    int cnt = 4;
    void *fargs[] = {&dc, &v, &cnt};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 4, 1, 1, 0, NULL, fargs, NULL));
    unsigned got[4];
    CHECK(cuMemcpyDtoH(got, dc, sizeof got));
    EXPECT(got[0] == 0xcafe && got[3] == 0xcafe);

    CUlibrary lib, lib2;
    CUkernel k;
    CUfunction kf;
    CUmodule lm;
    CHECK(cuLibraryLoadData(&lib, sim_image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&k, lib, "vector_add_f32"));
    CHECK(cuKernelGetFunction(&kf, k));
    CHECK(cuLibraryGetModule(&lm, lib));
    CHECK(cuLibraryLoadFromFile(&lib2, path, NULL, NULL, 0, NULL, NULL, 0));
    unlink(path);
    CHECK(cuMemcpyHtoD(da, a, sizeof a));
    CHECK(cuMemcpyHtoD(db, b, sizeof b));
    CHECK(cuLaunchKernel(kf, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(c, dc, sizeof c));
    EXPECT(c[N - 1] == a[N - 1] + b[N - 1]);
    EXPECT_RC(cuModuleLoadData(&m5, "\x7f" "ELF-not-really"), CUDA_ERROR_INVALID_IMAGE);
    CHECK(cuLibraryUnload(lib));
    CHECK(cuLibraryUnload(lib2));
    CHECK(cuModuleUnload(m2));
    CHECK(cuModuleUnload(m3));
    CHECK(cuModuleUnload(m4));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
}

static void streams_and_events(void) {
    CUmodule mod;
    CUfunction spin;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, 0));
    CHECK(cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, -1));
    CUevent start, stop, mark;
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&mark, CU_EVENT_DISABLE_TIMING));
    unsigned long long ns = 100000000ULL; /* 100 ms */
    void *args[] = {&ns};
    CHECK(cuEventRecord(start, s1));
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s1, args, NULL));
    CHECK(cuEventRecord(stop, s1));
    EXPECT_RC(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
    /* s2 waits for s1's event: its marker cannot complete before the spin ends. */
    CHECK(cuStreamWaitEvent(s2, stop, 0));
    CHECK(cuEventRecord(mark, s2));
    CHECK(cuEventSynchronize(mark));
    CHECK(cuEventQuery(stop));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 90 && ms < 5000);
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuStreamQuery(s1));
    CHECK(cuEventDestroy(start));
    CHECK(cuEventDestroy(stop));
    CHECK(cuEventDestroy(mark));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    EXPECT_RC(cuStreamSynchronize(s1), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuModuleUnload(mod));
}

/* An asynchronous launch that faults returns success; the fault surfaces at the next sync. */
static void async_error(void) {
    CUmodule mod;
    CUfunction add;
    CHECK(cuModuleLoadData(&mod, sim_image));
    CHECK(cuModuleGetFunction(&add, mod, "vector_add_f32"));
    CUdeviceptr bad = 0x1000;
    int n = 16;
    void *args[] = {&bad, &bad, &bad, &n};
    CHECK(cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

static void errors(void) {
    const char *s;
    CHECK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    EXPECT(strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CHECK(cuGetErrorString(CUDA_ERROR_NOT_READY, &s));
    EXPECT(strcmp(s, "device not ready") == 0);
    EXPECT_RC(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    /* A stream capture's errors, which the worker's driver returns through a guest's capture. */
    CHECK(cuGetErrorName((CUresult)900, &s));
    EXPECT(strcmp(s, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") == 0);
    CHECK(cuGetErrorString((CUresult)901, &s));
    EXPECT(strcmp(s, "operation failed due to a previous error during capture") == 0);
    CHECK(cuGetErrorName((CUresult)916, &s));
    EXPECT(strcmp(s, "CUDA_ERROR_KEY_ROTATION") == 0);
}

int main(void) {
    CUdevice d;
    EXPECT_RC(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(cuInit(0));
    CUcontext primary;
    devices();
    contexts(&primary);
    memory();
    copies_2d();
    modules_and_launches();
    streams_and_events();
    errors();
    async_error();
    CHECK(cuDevicePrimaryCtxRelease(0));
    printf("api_test: OK\n");
    return 0;
}

/* Managed and mapped host memory without a shared arena (over TCP): device memory kept coherent
 * with the program's pages at the same address by the guest library (driver/coherence.c). The
 * program's own SIGSEGV handler, installed first, still gets the faults that are not the
 * library's; several allocations are each kept; a CPU read waits for a kernel still running; a
 * freed allocation leaves nothing mapped; bad sizes, and a device address taken in this process at
 * every try, are refused and leave the quota as it was; a taken address is retried elsewhere.
 * Prints "coherence_test: OK". */
#define _GNU_SOURCE
#include "check.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

enum { N = 1 << 16 };

static sigjmp_buf back;
static volatile sig_atomic_t own_faults;
static void *volatile own_addr;

static void own_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    own_faults++;
    own_addr = si->si_addr;
    siglongjmp(back, 1);
}

/* touches reads *p under the program's handler: 1 if it faulted into it (at p). */
static int faults_into_own_handler(volatile unsigned *p) {
    int before = own_faults;
    if (sigsetjmp(back, 1) == 0) {
        unsigned v = *p;
        (void)v;
        return 0;
    }
    return own_faults == before + 1 && own_addr == (void *)p;
}

/* worker: one of several threads, each with its own stream and memory attached to it, writing,
 * launching and reading while the others do: every launch hands all managed memory to the device,
 * so each thread's pages keep moving under the others' feet. */
struct worker {
    CUcontext ctx;
    CUfunction fill;
    int ok;
};

static void *worker(void *arg) {
    struct worker *w = arg;
    enum { M = 1 << 14 };
    CHECK(cuCtxSetCurrent(w->ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, M * 4, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    unsigned *h = (unsigned *)(uintptr_t)m;
    int half = M / 2;
    w->ok = 1;
    for (unsigned it = 0; it < 20; it++) {
        for (int i = 0; i < M; i++) h[i] = it;
        unsigned v = it + 1000;
        void *args[] = {&m, &v, &half};
        CHECK(cuLaunchKernel(w->fill, M / 2 / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < M; i++)
            if (h[i] != (i < M / 2 ? v : it)) w->ok = 0;
    }
    CHECK(cuMemFree(m));
    CHECK(cuStreamDestroy(s));
    return NULL;
}

static CUdeviceptr managed(size_t bytes) {
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL));
    EXPECT(m % sysconf(_SC_PAGESIZE) == 0);
    return m;
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = own_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    EXPECT(sigaction(SIGSEGV, &sa, NULL) == 0);
    unsigned *guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(guard != MAP_FAILED);

    CUmodule mod;
    CUfunction add = sim_kernel("vector_add_f32", &mod), fill, spin;
    CHECK(cuModuleGetFunction(&fill, mod, "fill_u32"));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    int v;
    CHECK(cuDeviceGetAttribute(&v, 89, 0)); /* CONCURRENT_MANAGED_ACCESS */
    EXPECT(v == 0);
    CHECK(cuDeviceGetAttribute(&v, 88, 0)); /* PAGEABLE_MEMORY_ACCESS */
    EXPECT(v == 0);

    /* Bad sizes: refused, nothing charged. */
    size_t free0, free1, total;
    CHECK(cuMemGetInfo(&free0, &total));
    CUdeviceptr m;
    EXPECT_RC(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemAllocManaged(&m, (size_t)1 << 40, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_RC(cuMemAllocManaged(&m, SIZE_MAX, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    void *h;
    EXPECT_RC(cuMemHostAlloc(&h, (size_t)1 << 40, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);

    /* The device's address taken in this process: the next allocation is tried (the simulated
     * backend hands out addresses upwards); where every try is taken, refused, nothing charged. */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    CUdeviceptr probe;
    CHECK(cuMemAlloc(&probe, pg));
    CHECK(cuMemFree(probe));
    uintptr_t next = (probe + pg + pg - 1) / pg * pg; /* where the next shadow would go */
    void *blk = mmap((void *)next, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    EXPECT(blk == (void *)next);
    CUdeviceptr moved;
    CHECK(cuMemAllocManaged(&moved, pg, CU_MEM_ATTACH_GLOBAL));
    EXPECT(moved != next && moved > next);
    *(unsigned *)(uintptr_t)moved = 5;
    unsigned five = 0;
    CHECK(cuMemcpyDtoH(&five, moved, 4));
    EXPECT(five == 5);
    CHECK(cuMemFree(moved));
    munmap(blk, pg);
    CHECK(cuMemAlloc(&probe, pg));
    CHECK(cuMemFree(probe));
    size_t span = 64 << 20; /* four tries of 4 MiB and a page each fall in it */
    next = (probe + pg + pg - 1) / pg * pg;
    blk = mmap((void *)next, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    EXPECT(blk == (void *)next);
    CHECK(cuMemGetInfo(&free0, &total));
    EXPECT_RC(cuMemAllocManaged(&m, 4 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);
    munmap(blk, span);

    /* Three allocations: the program writes a and b, a kernel adds them into c. */
    CUdeviceptr a = managed(N * 4), b = managed(N * 4), c = managed(N * 4);
    float *ha = (float *)(uintptr_t)a, *hb = (float *)(uintptr_t)b, *hc = (float *)(uintptr_t)c;
    unsigned is_managed = 0;
    CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, b + 8));
    EXPECT(is_managed == 1);
    void *host_of = NULL;
    CHECK(cuPointerGetAttribute(&host_of, CU_POINTER_ATTRIBUTE_HOST_POINTER, b + 8));
    EXPECT(host_of == (void *)(uintptr_t)(b + 8));
    for (int i = 0; i < N; i++) ha[i] = (float)i, hb[i] = 2.0f * (float)i;
    EXPECT(hc[N - 1] == 0.0f); /* fresh managed memory reads as zero */
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(hc[i] == 3.0f * (float)i);
    EXPECT(ha[7] == 7.0f); /* inputs read back as they were */

    /* One element written in the middle: the next kernel sees it, and nothing else changed. */
    ha[N / 2 + 3] = -1.0f;
    CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(hc[i] == (i == N / 2 + 3 ? 2.0f * (float)i - 1.0f : 3.0f * (float)i));

    /* A CPU read while the stream is still busy waits for its work, without the program syncing. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long ns = 200 * 1000 * 1000ull;
    void *spin_args[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, spin_args, NULL));
    unsigned val = 0xabcd;
    int half = N / 2;
    void *fill_args[] = {&c, &val, &half};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, s, fill_args, NULL));
    CHECK(cuStreamAttachMemAsync(s, c, 0, CU_MEM_ATTACH_SINGLE));
    unsigned *uc = (unsigned *)hc;
    EXPECT(uc[0] == val && uc[N / 2 - 1] == val);
    EXPECT(hc[N / 2] == 3.0f * (float)(N / 2));

    /* Copies name managed memory as device memory, either side. */
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, N * 4));
    CHECK(cuMemcpyHtoD(dev, ha, N * 4)); /* managed source: the device's copy, dirty pages first */
    ha[0] = 42.0f;
    CHECK(cuMemcpyDtoH(hb, dev, N * 4)); /* managed destination */
    EXPECT(hb[N / 2 + 3] == -1.0f && hb[0] == 0.0f && ha[0] == 42.0f);

    /* The program's handler still gets its own faults, before and after the library's. */
    EXPECT(faults_into_own_handler(guard));
    EXPECT(hb[5] == 5.0f);
    EXPECT(faults_into_own_handler(guard + 1));

    /* Freed: its address is mapped no more, a read faults into the program's handler. */
    CHECK(cuMemFree(b));
    EXPECT(faults_into_own_handler((volatile unsigned *)hb));

    /* Threads at once. */
    struct worker w[4];
    pthread_t th[4];
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.ctx = ctx, .fill = fill};
        EXPECT(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        EXPECT(pthread_join(th[i], NULL) == 0);
        EXPECT(w[i].ok);
    }

    /* Mapped host memory: its device pointer is its own address, kept coherent the same way. */
    unsigned *mh;
    CHECK(cuMemHostAlloc((void **)&mh, N * 4, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dm;
    CHECK(cuMemHostGetDevicePointer(&dm, mh, 0));
    EXPECT(dm == (CUdeviceptr)(uintptr_t)mh);
    EXPECT_RC(cuMemFree(dm), CUDA_ERROR_INVALID_VALUE);            /* host memory, freed by cuMemFreeHost */
    EXPECT_RC(cuMemFreeHost((void *)(uintptr_t)a), CUDA_ERROR_INVALID_VALUE); /* managed, freed by cuMemFree */
    for (int i = 0; i < N; i++) mh[i] = (unsigned)i;
    unsigned seven = 7;
    void *fill_mh[] = {&dm, &seven, &half};
    CHECK(cuLaunchKernel(fill, N / 2 / 256, 1, 1, 256, 1, 1, 0, NULL, fill_mh, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++) EXPECT(mh[i] == (i < N / 2 ? 7u : (unsigned)i));
    CHECK(cuMemFreeHost(mh));
    EXPECT(faults_into_own_handler((volatile unsigned *)mh));

    CHECK(cuMemFree(a));
    CHECK(cuMemFree(c));
    CHECK(cuMemFree(dev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);
    printf("coherence_test: OK\n");
    return 0;
}

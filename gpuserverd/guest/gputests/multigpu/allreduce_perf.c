/* allreduce_perf: nccl-tests' all_reduce_perf measure, one process per rank (as torchrun runs
 * ranks), against whichever libnccl.so.2 and libcuda.so.1 the loader finds: NVIDIA's (native) or
 * gpucloud's (through gpuserverd). Built against gpucloud's own cuda.h and nccl.h (NCCL 2.28's ABI).
 *
 *   RANK=r WORLD_SIZE=n allreduce_perf IDFILE [MAXBYTES]      (rank r on device r)
 *
 * Rank 0 writes the unique id to IDFILE; the others wait for it. For each size from 8 bytes to
 * MAXBYTES (default 1 GiB), doubling: 5 warm-up and 20 timed out-of-place float sum all-reduces on
 * one stream, host wall time around the timed ones (the stream synchronised after), as nccl-tests
 * does; algbw = bytes/time, busbw = algbw * 2(n-1)/n. Every rank checks the result (each rank
 * sends rank+1: the sum is n(n+1)/2). Rank 0 prints one line per size:
 *   size_bytes time_us algbw_GBps busbw_GBps ok */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define CK(x)                                                                                     \
    do {                                                                                          \
        CUresult r_ = (x);                                                                        \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s = %d\n", rank, __FILE__, __LINE__, #x, (int)r_);  \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define NC(x)                                                                                     \
    do {                                                                                          \
        ncclResult_t r_ = (x);                                                                    \
        if (r_ != ncclSuccess) {                                                                  \
            fprintf(stderr, "rank %d: %s:%d: %s = %d (%s: %s)\n", rank, __FILE__, __LINE__, #x,  \
                    (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL));                     \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static int rank;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void share_id(const char *path, int n, ncclUniqueId *id) {
    if (rank == 0) {
        NC(ncclGetUniqueId(id));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
            perror(path);
            exit(1);
        }
        return;
    }
    (void)n;
    for (int i = 0; i < 6000; i++) { /* 60 s */
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t k = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (k == 1) return;
        }
        usleep(10000);
    }
    fprintf(stderr, "rank %d: no unique id in %s\n", rank, path);
    exit(1);
}

int main(int argc, char **argv) {
    const char *re = getenv("RANK"), *we = getenv("WORLD_SIZE");
    if (argc < 2 || !re || !we) {
        fprintf(stderr, "usage: RANK=r WORLD_SIZE=n %s IDFILE [MAXBYTES]\n", argv[0]);
        return 2;
    }
    rank = atoi(re);
    int n = atoi(we);
    size_t maxb = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)1 << 30;
    CK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, rank));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    ncclUniqueId id;
    share_id(argv[1], n, &id);
    ncclComm_t comm;
    double t0 = now();
    NC(ncclCommInitRank(&comm, n, id, rank));
    if (rank == 0) printf("# ranks %d, communicator made in %.3f s\n", n, now() - t0);
    CUdeviceptr sb, rb;
    CK(cuMemAlloc(&sb, maxb));
    CK(cuMemAlloc(&rb, maxb));
    float v = (float)(rank + 1);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    CK(cuMemsetD32(sb, bits, maxb / 4));
    CK(cuMemsetD32(rb, 0, maxb / 4));
    CK(cuCtxSynchronize());
    const float want = (float)n * (n + 1) / 2;
    if (rank == 0) printf("# size_bytes time_us algbw_GBps busbw_GBps ok\n");
    int bad = 0;
    for (size_t bytes = 8; bytes <= maxb; bytes *= 2) {
        size_t count = bytes / 4;
        for (int i = 0; i < 5; i++) NC(ncclAllReduce((void *)sb, (void *)rb, count, ncclFloat, ncclSum, comm, s));
        CK(cuStreamSynchronize(s));
        const int iters = 20;
        double a = now();
        for (int i = 0; i < iters; i++) NC(ncclAllReduce((void *)sb, (void *)rb, count, ncclFloat, ncclSum, comm, s));
        CK(cuStreamSynchronize(s));
        double t = (now() - a) / iters;
        float first, last;
        CK(cuMemcpyDtoH(&first, rb, 4));
        CK(cuMemcpyDtoH(&last, rb + (count - 1) * 4, 4));
        int ok = first == want && last == want;
        bad += !ok;
        double alg = bytes / t / 1e9;
        if (rank == 0) {
            printf("%zu %.2f %.3f %.3f %d\n", bytes, t * 1e6, alg, alg * 2.0 * (n - 1) / n, ok);
            fflush(stdout);
        }
    }
    ncclResult_t async;
    NC(ncclCommGetAsyncError(comm, &async));
    NC(ncclCommFinalize(comm));
    NC(ncclCommDestroy(comm));
    if (rank == 0) printf("# %s\n", bad ? "WRONG RESULTS" : "all results right");
    return bad != 0 || async != ncclSuccess;
}

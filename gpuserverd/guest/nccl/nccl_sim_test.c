/* gpucloud's libnccl over the guest library and a real gpuserverd on the simulated backend.
 *   nccl_sim_test N          : N ranks, one per GPU of the session: collectives of known values
 *                              with their sums (and prod/max/min/avg, several types), broadcast,
 *                              reduce, all-gather, reduce-scatter, send/recv, refusals.
 *   nccl_sim_test id         : prints a unique id of this session (hex) and waits for a line.
 *   nccl_sim_test foreign HEX: tries to join the communicator of another session's unique id.
 *   nccl_sim_test rank R N [HEX]: one rank of N in this process (its own session), on device R:
 *                              rank 0 prints a new unique id (hex) first, the others join HEX;
 *                              all-reduce, broadcast and a send/recv ring with the other processes.
 * Prints "nccl_sim_test: OK". */
#include "nccl.h"

#include "../tests/check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NC(call)                                                                              \
    do {                                                                                      \
        ncclResult_t r_ = (call);                                                             \
        if (r_ != ncclSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s = %d (%s: %s)\n", __FILE__, __LINE__, #call, r_,       \
                    ncclGetErrorString(r_), ncclGetLastError(NULL));                          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
/* Not in gpucloud's nccl.h: called as NVIDIA's signature-less refusal check. */
ncclResult_t ncclAlltoAll(const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream);

enum { MAXR = 8, COUNT = 1000 };
static int nr;
static CUcontext ctx[MAXR];
static CUstream st[MAXR];
static ncclComm_t comm[MAXR];

static CUdeviceptr alloc_on(int r, size_t bytes) {
    CUdeviceptr p;
    CHECK(cuCtxSetCurrent(ctx[r]));
    CHECK(cuMemAlloc(&p, bytes));
    CHECK(cuMemsetD8(p, 0, bytes));
    return p;
}
static void put(int r, CUdeviceptr p, const void *h, size_t n) {
    CHECK(cuCtxSetCurrent(ctx[r]));
    CHECK(cuMemcpyHtoD(p, h, n));
}
static void get(int r, void *h, CUdeviceptr p, size_t n) {
    CHECK(cuCtxSetCurrent(ctx[r]));
    CHECK(cuStreamSynchronize(st[r]));
    CHECK(cuMemcpyDtoH(h, p, n));
}

static uint16_t f2h(float f) { /* exact for the small integers and halves used here */
    uint32_t u;
    memcpy(&u, &f, 4);
    if (f == 0) return 0;
    uint32_t e = ((u >> 23) & 0xff) - 112;
    return (uint16_t)((u >> 16 & 0x8000) | e << 10 | (u & 0x7fffff) >> 13);
}
static float h2f(uint16_t h) {
    if (!h) return 0;
    uint32_t u = (uint32_t)(h & 0x8000) << 16 | (((h >> 10) & 0x1f) + 112) << 23 | (uint32_t)(h & 0x3ff) << 13;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the values used */
}

/* float32 all-reduce of rank r's value r*1000+i: sum, max, min, avg, checked on every rank. */
static void allreduce_f32(void) {
    CUdeviceptr s[MAXR], d[MAXR];
    static float h[COUNT];
    for (int r = 0; r < nr; r++) {
        s[r] = alloc_on(r, sizeof h);
        d[r] = alloc_on(r, sizeof h);
        for (int i = 0; i < COUNT; i++) h[i] = (float)(r * 1000 + i);
        put(r, s[r], h, sizeof h);
    }
    const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclMin, ncclAvg};
    for (unsigned k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        NC(ncclGroupStart());
        for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)d[r], COUNT, ncclFloat32, ops[k], comm[r], st[r]));
        NC(ncclGroupEnd());
        for (int r = 0; r < nr; r++) {
            get(r, h, d[r], sizeof h);
            for (int i = 0; i < COUNT; i++) {
                float sum = (float)(1000 * nr * (nr - 1) / 2 + nr * i), want = sum;
                if (ops[k] == ncclMax) want = (float)((nr - 1) * 1000 + i);
                if (ops[k] == ncclMin) want = (float)i;
                if (ops[k] == ncclAvg) want = sum / nr;
                if (h[i] != want) {
                    fprintf(stderr, "op %d rank %d [%d] = %g, want %g\n", ops[k], r, i, h[i], want);
                    exit(1);
                }
            }
        }
    }
    /* In place, as DDP reduces its buckets. */
    NC(ncclGroupStart());
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)s[r], COUNT, ncclFloat, ncclSum, comm[r], st[r]));
    NC(ncclGroupEnd());
    get(nr - 1, h, s[nr - 1], sizeof h);
    EXPECT(h[7] == (float)(1000 * nr * (nr - 1) / 2 + nr * 7));
    printf("nccl_sim_test: float32 all-reduce sum/max/min/avg over %d ranks right\n", nr);
}

/* int32 product, half sum, bf16 avg, double sum. */
static void allreduce_types(void) {
    CUdeviceptr s[MAXR], d[MAXR];
    for (int r = 0; r < nr; r++) {
        s[r] = alloc_on(r, 64 * 8);
        d[r] = alloc_on(r, 64 * 8);
    }
    int32_t iv[64];
    for (int r = 0; r < nr; r++) {
        for (int i = 0; i < 64; i++) iv[i] = (r + 2) * (i % 2 ? -1 : 1);
        put(r, s[r], iv, sizeof iv);
    }
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)d[r], 64, ncclInt32, ncclProd, comm[r], st[r]));
    int32_t prod = 1;
    for (int r = 0; r < nr; r++) prod *= r + 2;
    get(0, iv, d[0], sizeof iv);
    EXPECT(iv[0] == prod && iv[1] == (nr % 2 ? -prod : prod));

    uint16_t hv[64];
    for (int r = 0; r < nr; r++) {
        for (int i = 0; i < 64; i++) hv[i] = f2h(0.5f * (r + 1) + i);
        put(r, s[r], hv, sizeof hv);
    }
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)d[r], 64, ncclHalf, ncclSum, comm[r], st[r]));
    get(nr - 1, hv, d[nr - 1], sizeof hv);
    EXPECT(h2f(hv[3]) == 0.5f * nr * (nr + 1) / 2 + 3.0f * nr);

    for (int r = 0; r < nr; r++) {
        for (int i = 0; i < 64; i++) hv[i] = f2bf((float)(4 * r + i));
        put(r, s[r], hv, sizeof hv);
    }
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)d[r], 64, ncclBfloat16, ncclAvg, comm[r], st[r]));
    get(0, hv, d[0], sizeof hv);
    EXPECT(bf2f(hv[2]) == 2.0f * (nr - 1) + 2.0f);

    double dv[64];
    for (int r = 0; r < nr; r++) {
        for (int i = 0; i < 64; i++) dv[i] = 0.25 * r + i;
        put(r, s[r], dv, sizeof dv);
    }
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)s[r], (void *)d[r], 64, ncclDouble, ncclSum, comm[r], st[r]));
    get(1, dv, d[1], sizeof dv);
    EXPECT(dv[5] == 0.25 * nr * (nr - 1) / 2 + 5.0 * nr);
    printf("nccl_sim_test: int32 prod, half sum, bf16 avg, double sum right\n");
}

/* Broadcast from the last rank, reduce to rank 0, all-gather, reduce-scatter, a send/recv ring. */
static void others(void) {
    int32_t v[COUNT * MAXR];
    CUdeviceptr s[MAXR], d[MAXR];
    for (int r = 0; r < nr; r++) {
        s[r] = alloc_on(r, sizeof v);
        d[r] = alloc_on(r, sizeof v);
        for (int i = 0; i < COUNT * nr; i++) v[i] = 100 * r + i;
        put(r, s[r], v, sizeof v);
    }
    int root = nr - 1;
    NC(ncclGroupStart());
    for (int r = 0; r < nr; r++) NC(ncclBroadcast((void *)s[r], (void *)d[r], COUNT, ncclInt32, root, comm[r], st[r]));
    NC(ncclGroupEnd());
    for (int r = 0; r < nr; r++) {
        get(r, v, d[r], COUNT * 4);
        EXPECT(v[0] == 100 * root && v[COUNT - 1] == 100 * root + COUNT - 1);
    }
    for (int r = 0; r < nr; r++) NC(ncclReduce((void *)s[r], (void *)d[r], COUNT, ncclInt32, ncclSum, 0, comm[r], st[r]));
    get(0, v, d[0], COUNT * 4);
    EXPECT(v[10] == 100 * nr * (nr - 1) / 2 + 10 * nr);
    get(1, v, d[1], 4);
    EXPECT(v[0] == 100 * root); /* not the root: its buffer keeps the broadcast */

    for (int r = 0; r < nr; r++) NC(ncclAllGather((void *)s[r], (void *)d[r], COUNT, ncclInt32, comm[r], st[r]));
    get(1, v, d[1], (size_t)COUNT * nr * 4);
    for (int r = 0; r < nr; r++) EXPECT(v[r * COUNT + 9] == 100 * r + 9);

    for (int r = 0; r < nr; r++) NC(ncclReduceScatter((void *)s[r], (void *)d[r], COUNT, ncclInt32, ncclSum, comm[r], st[r]));
    for (int r = 0; r < nr; r++) {
        get(r, v, d[r], COUNT * 4);
        EXPECT(v[1] == 100 * nr * (nr - 1) / 2 + (r * COUNT + 1) * nr);
    }

    NC(ncclGroupStart());
    for (int r = 0; r < nr; r++) {
        NC(ncclSend((void *)s[r], COUNT, ncclInt32, (r + 1) % nr, comm[r], st[r]));
        NC(ncclRecv((void *)d[r], COUNT, ncclInt32, (r + nr - 1) % nr, comm[r], st[r]));
    }
    NC(ncclGroupEnd());
    for (int r = 0; r < nr; r++) {
        get(r, v, d[r], COUNT * 4);
        EXPECT(v[4] == 100 * ((r + nr - 1) % nr) + 4);
    }
    printf("nccl_sim_test: broadcast, reduce, all-gather, reduce-scatter, send/recv right\n");
}

static void refusals(void) {
    EXPECT(ncclAlltoAll(NULL, NULL, 1, ncclFloat, comm[0], NULL) == ncclInvalidUsage);
    EXPECT(strstr(ncclGetLastError(NULL), "not supported") != NULL);
    EXPECT(ncclBroadcast(NULL, NULL, 1, ncclFloat, nr, comm[0], NULL) == ncclInvalidArgument);
    EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, (ncclComm_t)&nr, NULL) == ncclInvalidArgument);
    EXPECT(ncclGroupEnd() == ncclInvalidUsage);
    ncclUniqueId id;
    NC(ncclGetUniqueId(&id));
    ncclComm_t c;
    EXPECT(ncclCommInitRank(&c, 0, id, 0) == ncclInvalidArgument);
    EXPECT(ncclCommInitRank(&c, 2, id, 2) == ncclInvalidArgument);
    memset(id.internal + 8, 0x5a, 16);
    EXPECT(ncclCommInitRank(&c, 1, id, 0) == ncclInvalidArgument); /* an id never issued */
    EXPECT(ncclCommDestroy(NULL) == ncclSuccess);
    EXPECT(strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)") == 0);
    /* A collective goes without a reply: a part the worker's NCCL refuses (fp8, which the
     * simulation does not reduce, on NULL buffers) is the communicator's asynchronous error. */
    ncclResult_t async = ncclSuccess;
    NC(ncclCommGetAsyncError(comm[0], &async));
    EXPECT(async == ncclSuccess);
    NC(ncclAllReduce(NULL, NULL, 1, ncclFloat8e4m3, ncclSum, comm[0], NULL));
    NC(ncclCommGetAsyncError(comm[0], &async));
    EXPECT(async == ncclInternalError);
    EXPECT(strstr(ncclGetLastError(NULL), "datatype 10") != NULL);
}

static void hexid(const ncclUniqueId *id, char *out) {
    for (int i = 0; i < 24; i++) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int parse_id(const char *hex, ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    for (int i = 0; i < 24; i++) {
        unsigned b;
        if (sscanf(hex + 2 * i, "%2x", &b) != 1) return -1;
        id->internal[i] = (char)b;
    }
    return 0;
}

/* One rank of n in this process, as torchrun's processes are: rank r on device r. */
static int one_rank(int r, int n, const char *hex) {
    ncclUniqueId id;
    if (hex == NULL) {
        NC(ncclGetUniqueId(&id));
        char h[64];
        hexid(&id, h);
        printf("%s\n", h);
        fflush(stdout);
    } else if (parse_id(hex, &id) != 0) {
        return 2;
    }
    CUcontext c;
    CUstream s;
    CHECK(cuDevicePrimaryCtxRetain(&c, r));
    CHECK(cuCtxSetCurrent(c));
    CHECK(cuStreamCreate(&s, 0));
    ncclComm_t cm;
    NC(ncclCommInitRank(&cm, n, id, r));
    static float h[COUNT];
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, sizeof h));
    CHECK(cuMemAlloc(&b, sizeof h));
    for (int i = 0; i < COUNT; i++) h[i] = (float)(r * 1000 + i);
    CHECK(cuMemcpyHtoD(a, h, sizeof h));
    NC(ncclAllReduce((void *)a, (void *)b, COUNT, ncclFloat, ncclSum, cm, s));
    NC(ncclAllReduce((void *)a, (void *)a, COUNT, ncclFloat, ncclAvg, cm, s)); /* in place, after the sum */
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, b, sizeof h));
    for (int i = 0; i < COUNT; i++) {
        float want = (float)(1000 * n * (n - 1) / 2 + n * i);
        if (h[i] != want) {
            fprintf(stderr, "rank %d: sum[%d] = %g, want %g\n", r, i, h[i], want);
            return 1;
        }
    }
    CHECK(cuMemcpyDtoH(h, a, sizeof h));
    EXPECT(h[3] == (float)(1000 * n * (n - 1) / 2 + n * 3) / n);
    int32_t v = 100 + r, got = -1;
    CUdeviceptr iv, ov;
    CHECK(cuMemAlloc(&iv, 4));
    CHECK(cuMemAlloc(&ov, 4));
    CHECK(cuMemcpyHtoD(iv, &v, 4));
    NC(ncclBroadcast((void *)iv, (void *)ov, 1, ncclInt32, n - 1, cm, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(&got, ov, 4));
    EXPECT(got == 100 + n - 1);
    NC(ncclGroupStart());
    NC(ncclSend((void *)iv, 1, ncclInt32, (r + 1) % n, cm, s));
    NC(ncclRecv((void *)ov, 1, ncclInt32, (r + n - 1) % n, cm, s));
    NC(ncclGroupEnd());
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(&got, ov, 4));
    EXPECT(got == 100 + (r + n - 1) % n);

    /* Pre-multiplied sums (PyTorch's PREMUL_SUM): a host scalar 2, a device scalar 3. */
    float one = (float)(r + 1), two = 2, three = 3, fgot = 0;
    CUdeviceptr fv, fo, fs;
    CHECK(cuMemAlloc(&fv, 4));
    CHECK(cuMemAlloc(&fo, 4));
    CHECK(cuMemAlloc(&fs, 4));
    CHECK(cuMemcpyHtoD(fv, &one, 4));
    CHECK(cuMemcpyHtoD(fs, &three, 4));
    ncclRedOp_t host_op, dev_op;
    NC(ncclRedOpCreatePreMulSum(&host_op, &two, ncclFloat, ncclScalarHostImmediate, cm));
    two = 100; /* read at creation: changing it now changes nothing */
    NC(ncclRedOpCreatePreMulSum(&dev_op, (void *)fs, ncclFloat, ncclScalarDevice, cm));
    EXPECT(host_op >= ncclNumOps && dev_op >= ncclNumOps && host_op != dev_op);
    NC(ncclAllReduce((void *)fv, (void *)fo, 1, ncclFloat, host_op, cm, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(&fgot, fo, 4));
    EXPECT(fgot == (float)(n * (n + 1)));
    NC(ncclAllReduce((void *)fv, (void *)fo, 1, ncclFloat, dev_op, cm, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(&fgot, fo, 4));
    EXPECT(fgot == (float)(3 * n * (n + 1) / 2));
    NC(ncclRedOpDestroy(host_op, cm));
    NC(ncclRedOpDestroy(dev_op, cm));
    EXPECT(ncclRedOpDestroy(host_op, cm) == ncclInvalidArgument); /* gone */

    /* ncclCommSplit: with 3 ranks, rank 1 joins none and ranks 0 and 2 swap places (key -rank);
     * with 2, both swap. An all-reduce in the new communicator sums its members only. */
    int color = (n == 3 && r == 1) ? NCCL_SPLIT_NOCOLOR : 0;
    ncclComm_t sub = NULL;
    NC(ncclCommSplit(cm, color, -r, &sub, NULL));
    if (color == NCCL_SPLIT_NOCOLOR) {
        EXPECT(sub == NULL);
    } else {
        int members = n == 3 ? 2 : n, sr = -1, sc = -1;
        NC(ncclCommUserRank(sub, &sr));
        NC(ncclCommCount(sub, &sc));
        EXPECT(sc == members && sr == (r == 0 ? members - 1 : 0));
        NC(ncclAllReduce((void *)iv, (void *)ov, 1, ncclInt32, ncclSum, sub, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(&got, ov, 4));
        EXPECT(got == (n == 3 ? 100 + 102 : 100 + 101));
        NC(ncclCommDestroy(sub));
    }

    ncclResult_t async;
    NC(ncclCommGetAsyncError(cm, &async));
    EXPECT(async == ncclSuccess);
    NC(ncclCommFinalize(cm));
    NC(ncclCommDestroy(cm));
    printf("nccl_sim_test: rank %d of %d: all-reduce sum and avg, broadcast, send/recv ring, pre-multiplied sums, split right\n", r, n);
    printf("nccl_sim_test: OK\n");
    return 0;
}

int main(int argc, char **argv) {
    CHECK(cuInit(0));
    int v;
    NC(ncclGetVersion(&v));
    EXPECT(v == NCCL_VERSION_CODE);
    if (argc > 1 && strcmp(argv[1], "id") == 0) {
        ncclUniqueId id;
        NC(ncclGetUniqueId(&id));
        char hex[64];
        hexid(&id, hex);
        printf("%s\n", hex);
        fflush(stdout);
        char line[8];
        if (!fgets(line, sizeof line, stdin)) return 0; /* keep the session while the other tries */
        return 0;
    }
    if (argc > 3 && strcmp(argv[1], "rank") == 0) return one_rank(atoi(argv[2]), atoi(argv[3]), argc > 4 ? argv[4] : NULL);
    if (argc > 2 && strcmp(argv[1], "foreign") == 0) {
        ncclUniqueId id;
        if (parse_id(argv[2], &id) != 0) return 2;
        ncclComm_t c;
        ncclResult_t r = ncclCommInitRank(&c, 1, id, 0);
        printf("nccl_sim_test: foreign id: %d (%s)\n", r, ncclGetErrorString(r));
        return r == ncclInvalidArgument ? 0 : 1;
    }
    nr = argc > 1 ? atoi(argv[1]) : 2;
    int n;
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == nr && nr <= MAXR);
    for (int r = 0; r < nr; r++) {
        CHECK(cuDevicePrimaryCtxRetain(&ctx[r], r));
        CHECK(cuCtxSetCurrent(ctx[r]));
        CHECK(cuStreamCreate(&st[r], 0));
    }
    /* Ranks made one by one on each device, as one process driving several GPUs does. */
    ncclUniqueId id;
    NC(ncclGetUniqueId(&id));
    NC(ncclGroupStart());
    for (int r = 0; r < nr; r++) {
        CHECK(cuCtxSetCurrent(ctx[r]));
        NC(ncclCommInitRank(&comm[r], nr, id, r));
    }
    NC(ncclGroupEnd());
    for (int r = 0; r < nr; r++) {
        int x;
        NC(ncclCommCount(comm[r], &x));
        EXPECT(x == nr);
        NC(ncclCommCuDevice(comm[r], &x));
        EXPECT(x == r);
        NC(ncclCommUserRank(comm[r], &x));
        EXPECT(x == r);
    }
    ncclComm_t again;
    CHECK(cuCtxSetCurrent(ctx[0]));
    EXPECT(ncclCommInitRank(&again, nr, id, 0) != ncclSuccess); /* rank 0 taken */
    allreduce_f32();
    allreduce_types();
    others();
    refusals();
    for (int r = 0; r < nr; r++) NC(ncclCommDestroy(comm[r]));
    EXPECT(ncclCommCount(comm[0], &v) == ncclInvalidArgument); /* destroyed */

    /* ncclCommInitAll over the devices in reverse: rank i on device nr-1-i. */
    int devs[MAXR];
    for (int r = 0; r < nr; r++) devs[r] = nr - 1 - r;
    NC(ncclCommInitAll(comm, nr, devs));
    NC(ncclCommCuDevice(comm[0], &v));
    EXPECT(v == nr - 1);
    float one = 1, got[1];
    CUdeviceptr b[MAXR];
    for (int r = 0; r < nr; r++) {
        CHECK(cuCtxSetCurrent(ctx[devs[r]]));
        CHECK(cuMemAlloc(&b[r], 4));
        CHECK(cuMemcpyHtoD(b[r], &one, 4));
    }
    for (int r = 0; r < nr; r++) NC(ncclAllReduce((void *)b[r], (void *)b[r], 1, ncclFloat, ncclSum, comm[r], NULL));
    CHECK(cuCtxSetCurrent(ctx[devs[0]]));
    CHECK(cuMemcpyDtoH(got, b[0], 4));
    EXPECT(got[0] == (float)nr);
    for (int r = 0; r < nr; r++) NC(ncclCommDestroy(comm[r]));
    printf("nccl_sim_test: OK\n");
    return 0;
}

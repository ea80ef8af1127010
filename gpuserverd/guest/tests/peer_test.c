/* A session granted n GPUs (argv[1]): enumeration in the order granted (argv[2..]: the PCI bus ids
 * expected, in order), peer queries, peer access and copies between every pair done on the
 * server, a cross-device cuMemcpyDtoD, and an event of one device waited for by a stream of
 * another. Prints "peer_test: OK". */
#include "check.h"

#include <stdint.h>

#define N 1024

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int want = atoi(argv[1]);
    CHECK(cuInit(0));
    int n;
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == want);
    for (int i = 0; i < n && 2 + i < argc; i++) {
        char pci[32];
        CHECK(cuDeviceGetPCIBusId(pci, sizeof pci, i));
        if (strcasecmp(pci, argv[2 + i]) != 0) {
            fprintf(stderr, "device %d is %s, want %s\n", i, pci, argv[2 + i]);
            return 1;
        }
    }
    CUcontext ctx[8];
    CUdeviceptr buf[8];
    for (int i = 0; i < n; i++) {
        CHECK(cuDevicePrimaryCtxRetain(&ctx[i], i));
        CHECK(cuCtxSetCurrent(ctx[i]));
        CHECK(cuMemAlloc(&buf[i], N * 4));
        CHECK(cuMemsetD32(buf[i], 1000 + i, N));
    }
    /* Peer queries: every other device, never itself; an ordinal past the grant is refused. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int can = -1;
            CHECK(cuDeviceCanAccessPeer(&can, i, j));
            EXPECT(can == (i != j));
        }
    int can;
    EXPECT_RC(cuDeviceCanAccessPeer(&can, 0, n), CUDA_ERROR_INVALID_DEVICE);
    /* Peer access from device 0: once, not twice; not to itself; disabled once. */
    CHECK(cuCtxSetCurrent(ctx[0]));
    EXPECT_RC(cuCtxEnablePeerAccess(ctx[0], 0), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC(cuCtxDisablePeerAccess(ctx[1]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CHECK(cuCtxEnablePeerAccess(ctx[1], 0));
    EXPECT_RC(cuCtxEnablePeerAccess(ctx[1], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    EXPECT_RC(cuCtxEnablePeerAccess(ctx[n - 1 > 1 ? 2 : 1], 7), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCtxDisablePeerAccess(ctx[1]));
    CHECK(cuCtxEnablePeerAccess(ctx[1], 0));

    /* A ring of peer copies: device i's buffer into device i+1's second half. */
    for (int i = 0; i < n; i++) {
        int j = (i + 1) % n;
        CHECK(cuMemcpyPeer(buf[j] + N * 2, ctx[j], buf[i], ctx[i], N * 2));
    }
    for (int j = 0; j < n; j++) {
        unsigned v[N];
        CHECK(cuCtxSetCurrent(ctx[j]));
        CHECK(cuMemcpyDtoH(v, buf[j], sizeof v));
        int i = (j + n - 1) % n;
        for (int k = 0; k < N; k++)
            if (v[k] != (unsigned)(k < N / 2 ? 1000 + j : 1000 + i)) {
                fprintf(stderr, "device %d word %d = %u\n", j, k, v[k]);
                return 1;
            }
    }
    /* An async peer copy on a stream, then a plain DtoD across devices (unified addressing). */
    CHECK(cuCtxSetCurrent(ctx[1]));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemsetD32Async(buf[1], 77, N, s));
    CHECK(cuMemcpyPeerAsync(buf[0], ctx[0], buf[1], ctx[1], 16, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoD(buf[0] + 16, buf[1], 16));
    unsigned w[8];
    CHECK(cuMemcpyDtoH(w, buf[1], sizeof w)); /* device 1 current: its own buffer */
    EXPECT(w[0] == 77 && w[7] == 77);
    CHECK(cuCtxSetCurrent(ctx[0]));
    CHECK(cuMemcpyDtoH(w, buf[0], sizeof w));
    for (int k = 0; k < 8; k++) EXPECT(w[k] == 77);

    /* Events: recorded on device 0's stream after a memset there, waited for by device 1's stream
     * before a peer copy of that memory; synchronised and queried from device 1's context. */
    CHECK(cuCtxSetCurrent(ctx[0]));
    CUstream s0;
    CHECK(cuStreamCreate(&s0, 0));
    CUevent e;
    CHECK(cuEventCreate(&e, 0));
    CHECK(cuMemsetD32Async(buf[0], 4242, N, s0));
    CHECK(cuEventRecord(e, s0));
    CHECK(cuCtxSetCurrent(ctx[1]));
    CHECK(cuStreamWaitEvent(s, e, 0));
    CHECK(cuMemcpyPeerAsync(buf[1], ctx[1], buf[0], ctx[0], N * 4, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventSynchronize(e)); /* device 0's event, device 1 current */
    CHECK(cuEventQuery(e));
    CHECK(cuMemcpyDtoH(w, buf[1] + 4 * (N - 8), sizeof w));
    for (int k = 0; k < 8; k++) EXPECT(w[k] == 4242);
    CHECK(cuEventDestroy(e));
    CHECK(cuCtxSetCurrent(ctx[0]));
    CHECK(cuStreamDestroy(s0));
    CHECK(cuCtxSetCurrent(ctx[1]));
    CHECK(cuStreamDestroy(s));
    printf("peer_test: OK\n");
    return 0;
}

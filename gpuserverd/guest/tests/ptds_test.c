/* Per-thread default streams: CU_STREAM_PER_THREAD, and a NULL stream in the _ptsz entry points,
 * name the calling thread's own stream, not the legacy default stream. Thread A keeps its
 * per-thread stream busy (a 3 s kernel); thread B's per-thread stream is idle meanwhile, and its
 * _ptsz calls with a NULL stream run and finish on it. A per-thread stream cannot be destroyed.
 * cuGetProcAddress with the per-thread flag gives the _ptsz forms. Prints "ptds_test: OK". */
#include "check.h"

#include <pthread.h>

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*stream_fn)(CUstream);

static CUfunction spin;
static CUcontext primary;

static void *proc(const char *name, cuuint64_t flags) {
    void *fn = NULL;
    CHECK(cuGetProcAddress(name, &fn, 12000, flags, NULL));
    EXPECT(fn != NULL);
    return fn;
}

static void *thread_b(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(primary));
    EXPECT_RC(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS); /* A's kernel is not on it */
    launch_fn launch_ptsz = (launch_fn)proc("cuLaunchKernel_ptsz", 0);
    stream_fn sync_ptsz = (stream_fn)proc("cuStreamSynchronize_ptsz", 0);
    stream_fn query_ptsz = (stream_fn)proc("cuStreamQuery_ptsz", 0);
    unsigned long long none = 0;
    void *args[] = {&none};
    CHECK(launch_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(sync_ptsz(NULL)); /* its own stream: does not wait for A's kernel */
    EXPECT_RC(query_ptsz(NULL), CUDA_SUCCESS);
    return NULL;
}

int main(void) {
    spin = sim_kernel("spin", NULL);
    CHECK(cuCtxGetCurrent(&primary));
    unsigned long long long_ns = 3000000000ULL;
    void *args[] = {&long_ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, args, NULL));
    EXPECT_RC(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    pthread_t b;
    EXPECT(pthread_create(&b, NULL, thread_b, NULL) == 0);
    EXPECT(pthread_join(b, NULL) == 0);
    EXPECT_RC(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY); /* B did not wait for it */
    EXPECT_RC(cuStreamDestroy(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
    /* The per-thread lookups: the _ptsz forms, the newest version of each. */
    EXPECT(proc("cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == proc("cuLaunchKernel_ptsz", 0));
    EXPECT(proc("cuMemcpyHtoDAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
           proc("cuMemcpyHtoDAsync_v2_ptsz", 0));
    EXPECT(proc("cuLaunchKernel", CU_GET_PROC_ADDRESS_LEGACY_STREAM) == (void *)&cuLaunchKernel);
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    EXPECT_RC(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    printf("ptds_test: OK\n");
    return 0;
}

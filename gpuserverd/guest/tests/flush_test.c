/* A call sent without waiting (a launch) leaves on its own, from the flusher, soon after it was
 * queued, even if the program makes no further call: a 50 ms kernel queued and then left alone
 * for 500 ms has finished when the program next asks. Both ways the flusher may stand when the
 * launch is queued: idle (after a pause), and still counting down for an earlier batch that a
 * synchronising call already sent (a launch right after a synchronise). Prints "flush_test: OK". */
#include "check.h"

#include <time.h>

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    CUfunction spin = sim_kernel("spin", NULL);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long none = 0, long_ns = 50000000ULL;
    void *quick[] = {&none}, *slow[] = {&long_ns};
    for (int round = 0; round < 6; round++) {
        if (round % 2) { /* the flusher counting down for a batch the synchronise sent */
            CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, quick, NULL));
            CHECK(cuStreamSynchronize(s));
        } else {
            pause_ms(5); /* the flusher idle */
        }
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, slow, NULL));
        pause_ms(500);
        CUresult r = cuStreamQuery(s);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "round %d: the launch had not left: cuStreamQuery = %d\n", round, r);
            return 1;
        }
    }
    CHECK(cuStreamDestroy(s));
    printf("flush_test: OK\n");
    return 0;
}

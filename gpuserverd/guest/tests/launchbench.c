/* launchbench: the launch path alone, as gputests/gpubench measures it on a GPU, against whatever
 * gpuserverd it reaches: empty launches queued back to back on a stream then one synchronise
 * (async), and one launch then a synchronise (sync). Prints per repetition
 *   LAUNCH <async µs/launch> <sync µs/round> <guest CPU µs/launch over both>
 * With the simulated backend a launch is a Go call in the worker: this is the guest library's,
 * the transport's and the worker's own cost (docs/benchmarks/gpu-remote-h100.md, "Launch path").
 * Usage: launchbench [reps [async_n [sync_n]]] */
#include "check.h"

#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_self(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    int async_n = argc > 2 ? atoi(argv[2]) : 20000;
    int sync_n = argc > 3 ? atoi(argv[3]) : 2000;
    EXPECT(reps > 0 && async_n > 0 && sync_n > 0);
    CUmodule mod;
    CUfunction spin = sim_kernel("spin", &mod);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long zero = 0;
    void *args[] = {&zero};
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        double c0 = cpu_self(), t0 = now();
        for (int i = 0; i < async_n; i++) CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        CHECK(cuStreamSynchronize(s));
        double t1 = now();
        for (int i = 0; i < sync_n; i++) {
            CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            CHECK(cuCtxSynchronize());
        }
        double t2 = now(), c1 = cpu_self();
        if (r >= 0)
            printf("LAUNCH %.3f %.3f %.3f\n", (t1 - t0) / async_n * 1e6, (t2 - t1) / sync_n * 1e6,
                   (c1 - c0) / (async_n + sync_n) * 1e6);
        fflush(stdout);
    }
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    return 0;
}

/* cuRAND's host generators (curandCreateGeneratorHost): NVIDIA's compute on the CPU and write the
 * program's memory, and give the same numbers as a device generator of the same type, seed, offset
 * and ordering (the cuRAND guide says so; NVIDIA's MersenneTwisterGP11213 sample checks it). Here a
 * host generator is a device generator in the worker whose numbers come back into the program's
 * buffer: each generation goes to device scratch, waits for the context's work, and is copied out.
 * So the numbers are NVIDIA's device generator's; the GPU, not the VM's CPU, makes them. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

enum { MAX_HOST_GENERATORS = 64 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *host_gens[MAX_HOST_GENERATORS]; /* the generators made by curandCreateGeneratorHost */

static int is_host(void *g) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_HOST_GENERATORS && !found; i++) found = g && host_gens[i] == g;
    pthread_mutex_unlock(&mu);
    return found;
}

EXPORT int curandCreateGeneratorHost(void **gen, int rng_type) {
    if (!gen) return CURAND_STATUS_OUT_OF_RANGE;
    int st = gcr_curandCreateGenerator(gen, rng_type);
    if (st != CURAND_STATUS_SUCCESS) return st;
    pthread_mutex_lock(&mu);
    int slot = -1;
    for (int i = 0; i < MAX_HOST_GENERATORS && slot < 0; i++)
        if (!host_gens[i]) slot = i;
    if (slot >= 0) host_gens[slot] = *gen;
    pthread_mutex_unlock(&mu);
    if (slot < 0) { /* as NVIDIA's when it cannot allocate a generator's state */
        gcr_curandDestroyGenerator(*gen);
        return CURAND_STATUS_ALLOCATION_FAILED;
    }
    return CURAND_STATUS_SUCCESS;
}

EXPORT int curandDestroyGenerator(void *gen) {
    int st = gcr_curandDestroyGenerator(gen);
    if (st == CURAND_STATUS_SUCCESS) {
        pthread_mutex_lock(&mu);
        for (int i = 0; i < MAX_HOST_GENERATORS; i++)
            if (host_gens[i] == gen) host_gens[i] = NULL;
        pthread_mutex_unlock(&mu);
    }
    return st;
}

/* to_host runs gen (a remoting call writing n elements of size bytes at a device address) into
 * device scratch and copies the numbers to out. */
#define TO_HOST(size, call_with)                                                                       \
    do {                                                                                               \
        if (!out) return CURAND_STATUS_OUT_OF_RANGE;                                                   \
        if (n == 0) return CURAND_STATUS_SUCCESS;                                                      \
        if (n > ((size_t)1 << 40) / (size)) return CURAND_STATUS_ALLOCATION_FAILED;                   \
        CUdeviceptr scratch;                                                                           \
        if (cuMemAlloc(&scratch, n * (size)) != CUDA_SUCCESS) return CURAND_STATUS_ALLOCATION_FAILED;  \
        void *dev = (void *)(uintptr_t)scratch;                                                        \
        int st_ = (call_with);                                                                         \
        if (st_ == CURAND_STATUS_SUCCESS && (cuCtxSynchronize() != CUDA_SUCCESS ||                    \
                                             cuMemcpyDtoH(out, scratch, n * (size)) != CUDA_SUCCESS))  \
            st_ = CURAND_STATUS_LAUNCH_FAILURE;                                                        \
        cuMemFree(scratch);                                                                            \
        return st_;                                                                                    \
    } while (0)

EXPORT int curandGenerate(void *g, void *out, uint64_t n) {
    if (!is_host(g)) return gcr_curandGenerate(g, out, n);
    TO_HOST(4, gcr_curandGenerate(g, dev, n));
}
EXPORT int curandGenerateLongLong(void *g, void *out, uint64_t n) {
    if (!is_host(g)) return gcr_curandGenerateLongLong(g, out, n);
    TO_HOST(8, gcr_curandGenerateLongLong(g, dev, n));
}
EXPORT int curandGenerateUniform(void *g, void *out, uint64_t n) {
    if (!is_host(g)) return gcr_curandGenerateUniform(g, out, n);
    TO_HOST(4, gcr_curandGenerateUniform(g, dev, n));
}
EXPORT int curandGenerateUniformDouble(void *g, void *out, uint64_t n) {
    if (!is_host(g)) return gcr_curandGenerateUniformDouble(g, out, n);
    TO_HOST(8, gcr_curandGenerateUniformDouble(g, dev, n));
}
EXPORT int curandGenerateNormal(void *g, void *out, uint64_t n, float mean, float sd) {
    if (!is_host(g)) return gcr_curandGenerateNormal(g, out, n, mean, sd);
    TO_HOST(4, gcr_curandGenerateNormal(g, dev, n, mean, sd));
}
EXPORT int curandGenerateNormalDouble(void *g, void *out, uint64_t n, double mean, double sd) {
    if (!is_host(g)) return gcr_curandGenerateNormalDouble(g, out, n, mean, sd);
    TO_HOST(8, gcr_curandGenerateNormalDouble(g, dev, n, mean, sd));
}
EXPORT int curandGenerateLogNormal(void *g, void *out, uint64_t n, float mean, float sd) {
    if (!is_host(g)) return gcr_curandGenerateLogNormal(g, out, n, mean, sd);
    TO_HOST(4, gcr_curandGenerateLogNormal(g, dev, n, mean, sd));
}
EXPORT int curandGenerateLogNormalDouble(void *g, void *out, uint64_t n, double mean, double sd) {
    if (!is_host(g)) return gcr_curandGenerateLogNormalDouble(g, out, n, mean, sd);
    TO_HOST(8, gcr_curandGenerateLogNormalDouble(g, dev, n, mean, sd));
}
EXPORT int curandGeneratePoisson(void *g, void *out, uint64_t n, double lambda) {
    if (!is_host(g)) return gcr_curandGeneratePoisson(g, out, n, lambda);
    TO_HOST(4, gcr_curandGeneratePoisson(g, dev, n, lambda));
}
EXPORT int curandGeneratePoissonMethod(void *g, void *out, uint64_t n, double lambda, int method) {
    if (!is_host(g)) return gcr_curandGeneratePoissonMethod(g, out, n, lambda, method);
    TO_HOST(4, gcr_curandGeneratePoissonMethod(g, dev, n, lambda, method));
}
EXPORT int curandGenerateBinomial(void *g, void *out, uint64_t num, uint32_t n_, double p) {
    uint64_t n = num;
    if (!is_host(g)) return gcr_curandGenerateBinomial(g, out, num, n_, p);
    TO_HOST(4, gcr_curandGenerateBinomial(g, dev, num, n_, p));
}
EXPORT int curandGenerateBinomialMethod(void *g, void *out, uint64_t num, uint32_t n_, double p, int method) {
    uint64_t n = num;
    if (!is_host(g)) return gcr_curandGenerateBinomialMethod(g, out, num, n_, p, method);
    TO_HOST(4, gcr_curandGenerateBinomialMethod(g, dev, num, n_, p, method));
}

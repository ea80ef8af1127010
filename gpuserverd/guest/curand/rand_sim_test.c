/* rand_sim_test: gpucloud's libcurand.so.10 over the guest libcuda and a real gpuserverd on the
 * simulated backend (guesttest/mathlibs_test.go): a generator's uniform and normal numbers on a
 * stream (their range and moments), the same seed giving the same numbers and offsets advancing,
 * a bad length, a destroyed generator, a host generator giving the device generator's numbers
 * into host memory, cuRAND's host tables (the server's, here the simulated backend's: fetched once,
 * whole, the same pointer each time) and a refused distribution. Declares the cuRAND functions
 * it uses (CI has no curand.h). */
#include <cuda.h>
#include <math.h>
#include <string.h>

#include "gc_test_check.h"

typedef void *curandGenerator_t;
enum { PSEUDO_DEFAULT = 100, LENGTH_NOT_MULTIPLE = 105, INTERNAL_ERROR = 999 };
int curandCreateGenerator(curandGenerator_t *g, int type);
int curandCreateGeneratorHost(curandGenerator_t *g, int type);
int curandDestroyGenerator(curandGenerator_t g);
int curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long seed);
int curandSetGeneratorOffset(curandGenerator_t g, unsigned long long offset);
int curandSetStream(curandGenerator_t g, void *stream);
int curandGenerateUniform(curandGenerator_t g, float *out, size_t n);
int curandGenerateNormal(curandGenerator_t g, float *out, size_t n, float mean, float stddev);
int curandGenerate(curandGenerator_t g, unsigned int *out, size_t n);
int curandGetVersion(int *v);
int curandCreatePoissonDistribution(double lambda, void **dist);
int curandGetDirectionVectors32(unsigned (**v)[32], int set);
int curandGetDirectionVectors64(unsigned long long (**v)[64], int set);
int curandGetScrambleConstants32(unsigned **c);
int curandGetScrambleConstants64(unsigned long long **c);

enum { N = 4096 };
static float a[N], b[N];

static void uniform(curandGenerator_t g, CUdeviceptr d, unsigned long long seed, float *host) {
    OK(curandSetPseudoRandomGeneratorSeed(g, seed));
    OK(curandGenerateUniform(g, (float *)d, N));
    CHECK(cuMemcpyDtoH(host, d, N * sizeof(float)) == CUDA_SUCCESS);
}

/* Word i of the simulated backend's table (backend/sim/randtable.go): splitmix64 of (table, i), and
 * dimension 0 of a direction-vector set the van der Corput vectors. */
static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ x >> 27) * 0x94d049bb133111ebull;
    return x ^ x >> 31;
}
static uint64_t sim_word(uint64_t table, uint64_t i, int bits) {
    uint64_t v = table > 2 && i < (uint64_t)bits ? 1ull << (bits - 1 - i) : splitmix(table << 48 ^ i);
    return bits == 32 ? v & 0xffffffffu : v;
}

enum { DIMS = 20000, OUT_OF_RANGE = 104 };

static void tables(void) {
    unsigned (*v32)[32], (*again)[32], (*scr)[32];
    OK(curandGetDirectionVectors32(&v32, 101));
    for (int k = 0; k < 32; k++) CHECK(v32[0][k] == 1u << (31 - k)); /* dimension 0 */
    CHECK(v32[1][5] == sim_word(101, 37, 32) && v32[DIMS - 1][31] == sim_word(101, DIMS * 32 - 1, 32));
    OK(curandGetDirectionVectors32(&again, 101));
    CHECK(again == v32); /* kept: the same table */
    OK(curandGetDirectionVectors32(&scr, 102));
    CHECK(scr != v32 && scr[7][3] == sim_word(102, 7 * 32 + 3, 32));
    unsigned long long (*v64)[64];
    OK(curandGetDirectionVectors64(&v64, 103));
    for (int k = 0; k < 64; k++) CHECK(v64[0][k] == 1ull << (63 - k));
    CHECK(v64[DIMS - 1][63] == sim_word(103, (uint64_t)DIMS * 64 - 1, 64)); /* the whole 10 MB came */
    unsigned *c32;
    unsigned long long *c64;
    OK(curandGetScrambleConstants32(&c32));
    OK(curandGetScrambleConstants64(&c64));
    CHECK(c32[0] == sim_word(1, 0, 32) && c32[DIMS - 1] == sim_word(1, DIMS - 1, 32));
    CHECK(c64[123] == sim_word(2, 123, 64));
    CHECK(curandGetDirectionVectors32(&v32, 103) == OUT_OF_RANGE); /* a 64-bit set */
    CHECK(curandGetDirectionVectors64(&v64, 101) == OUT_OF_RANGE);
    CHECK(curandGetDirectionVectors32(&v32, 7) == OUT_OF_RANGE);
    CHECK(curandGetDirectionVectors32(NULL, 101) == OUT_OF_RANGE);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        curandGenerator_t g;
        CHECK(curandCreateGenerator(&g, PSEUDO_DEFAULT) != 0);
        printf("rand_sim_test foreign: OK\n");
        return 0;
    }
    GC_TEST_CONTEXT();
    int v;
    OK(curandGetVersion(&v));
    CHECK(v == 10400);
    curandGenerator_t g;
    OK(curandCreateGenerator(&g, PSEUDO_DEFAULT));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
    OK(curandSetStream(g, s));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N * sizeof(float)) == CUDA_SUCCESS);

    uniform(g, d, 1234, a);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        CHECK(a[i] > 0 && a[i] <= 1);
        sum += a[i];
    }
    CHECK(fabs(sum / N - 0.5) < 0.03);
    uniform(g, d, 1234, b); /* the same seed: the same numbers */
    CHECK(memcmp(a, b, sizeof a) == 0);
    uniform(g, d, 99, b); /* another: others */
    CHECK(memcmp(a, b, sizeof a) != 0);
    /* An offset of N/2 from seed 1234 starts where the first run's second half did. */
    OK(curandSetPseudoRandomGeneratorSeed(g, 1234));
    OK(curandSetGeneratorOffset(g, N / 2));
    OK(curandGenerateUniform(g, (float *)d, N / 2));
    CHECK(cuMemcpyDtoH(b, d, N / 2 * sizeof(float)) == CUDA_SUCCESS);
    CHECK(memcmp(a + N / 2, b, N / 2 * sizeof(float)) == 0);

    OK(curandGenerateNormal(g, (float *)d, N, 3.0f, 2.0f));
    CHECK(cuMemcpyDtoH(a, d, sizeof a) == CUDA_SUCCESS);
    double m = 0, var = 0;
    for (int i = 0; i < N; i++) m += a[i];
    m /= N;
    for (int i = 0; i < N; i++) var += (a[i] - m) * (a[i] - m);
    var /= N - 1;
    CHECK(fabs(m - 3.0) < 0.15 && fabs(var - 4.0) < 0.4);
    CHECK(curandGenerateNormal(g, (float *)d, 3, 0, 1) == LENGTH_NOT_MULTIPLE); /* normals come in pairs */

    OK(curandDestroyGenerator(g));
    CHECK(curandGenerate(g, (unsigned int *)d, 4) != 0); /* destroyed: no longer this session's */
    /* A host generator writes host memory: the numbers a device generator of the same seed gives. */
    curandGenerator_t h, g2;
    OK(curandCreateGeneratorHost(&h, PSEUDO_DEFAULT));
    OK(curandCreateGenerator(&g2, PSEUDO_DEFAULT));
    uniform(g2, d, 77, a);
    OK(curandSetPseudoRandomGeneratorSeed(h, 77));
    memset(b, 0, sizeof b);
    OK(curandGenerateUniform(h, b, N));
    CHECK(memcmp(a, b, sizeof a) == 0);
    OK(curandGenerateUniform(h, b, N)); /* and goes on from there */
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(curandGenerateUniform(h, NULL, N) != 0);
    OK(curandDestroyGenerator(h));
    OK(curandDestroyGenerator(g2));
    CHECK(curandGenerateUniform(h, b, N) != 0); /* destroyed */
    tables();
    void *dist;
    CHECK(curandCreatePoissonDistribution(1.0, &dist) == INTERNAL_ERROR);
    CHECK(curandCreatePoissonDistribution(1.0, &dist) == INTERNAL_ERROR);
    printf("rand_sim_test: OK\n");
    return 0;
}

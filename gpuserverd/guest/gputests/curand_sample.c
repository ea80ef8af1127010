/* curand_sample: what NVIDIA's cuRAND host-API samples do (cudaMalloc, a generator, a seed,
 * uniform and normal numbers, cudaMemcpy back), built against NVIDIA's curand.h and the runtime,
 * linked natively or against gpucloud's libraries (scripts/gpu-mathlibs.sh). It prints a digest
 * of the numbers: a run through gpucloud must print what the native run printed (the worker runs
 * NVIDIA's cuRAND with the same seed). */
#include <cuda_runtime.h>
#include <curand.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                       \
    do {                                                                                            \
        int rc_ = (int)(x);                                                                         \
        if (rc_ != 0) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, rc_);                 \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

int main(void) {
    enum { N = 1 << 20 };
    float *d, *h = malloc(N * sizeof *h);
    CK(cudaMalloc((void **)&d, N * sizeof *d));
    curandGenerator_t g;
    CK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CK(curandSetPseudoRandomGeneratorSeed(g, 1234ULL));
    CK(curandGenerateUniform(g, d, N));
    CK(cudaMemcpy(h, d, N * sizeof *h, cudaMemcpyDeviceToHost));
    double su = 0;
    for (int i = 0; i < N; i++) su += h[i];
    float first = h[0];
    CK(curandGenerateNormal(g, d, N, 1.0f, 2.0f));
    CK(cudaMemcpy(h, d, N * sizeof *h, cudaMemcpyDeviceToHost));
    double sn = 0;
    for (int i = 0; i < N; i++) sn += h[i];
    /* An odd count: whatever status NVIDIA's generator gives it, gpucloud's must give the same. */
    int odd = curandGenerateNormal(g, d, 3, 0, 1);
    printf("curand_sample: uniform mean %.9f first %.9f; normal mean %.9f last %.9f; odd count status %d\n", su / N, first,
           sn / N, h[N - 1], odd);
    CK(curandDestroyGenerator(g));
    CK(cudaFree(d));
    printf("curand_sample: OK\n");
    return 0;
}

// cuBLAS SGEMM throughput (C = A B, n x n x n, n = 64, 1024 and 4096) on a stream: GFLOP/s by events
// (time on the GPU) and by the wall clock from the first issue to the end of the synchronisation
// (what the program sees: through gpuserverd it includes the remoting), the two side by side for
// NVIDIA's cuBLAS natively and gpucloud's remoted one. A sample of C is checked against a CPU
// product, so a fast wrong answer fails. At n = 64 a call is mostly overhead: the row shows what
// remoting adds per call (GEMMs go without waiting, batched like launches).
// Prints "GEMM sgemm <n> events <GFLOP/s> wall <GFLOP/s> (...)", one line per n.
#include "rt_common.h"
#include <chrono>
#include <cmath>
#include <cublas_v2.h>
#include <vector>

#define CUBLAS(call)                                                                              \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, s_); \
            std::exit(2);                                                                         \
        }                                                                                         \
    } while (0)

static void bench(cublasHandle_t h, cudaStream_t s, int n, int reps) {
    std::vector<float> A((size_t)n * n), B((size_t)n * n), C((size_t)n * n);
    unsigned x = 99;
    auto rnd = [&] { x = x * 1103515245u + 12345u; return ((x >> 9) % 2001) / 1000.0f - 1.0f; };
    for (auto &v : A) v = rnd();
    for (auto &v : B) v = rnd();
    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, A.size() * 4));
    CHECK(cudaMalloc(&dB, B.size() * 4));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    CUBLAS(cublasSetMatrix(n, n, 4, A.data(), n, dA, n));
    CUBLAS(cublasSetMatrix(n, n, 4, B.data(), n, dB, n));
    const float one = 1, zero = 0;
    for (int i = 0; i < 2; i++) // warm-up: cuBLAS picks and loads its kernels
        CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n));
    CHECK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; i++)
        CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    double flop = 2.0 * n * n * (double)n * reps;
    CUBLAS(cublasGetMatrix(n, n, 4, dC, n, C.data(), n));
    double worst = 0;
    for (int t = 0; t < 64; t++) { // a sample of C(i, j) against the CPU
        int i = (t * 7919) % n, j = (t * 104729) % n;
        double r = 0;
        for (int k = 0; k < n; k++) r += (double)A[i + (size_t)k * n] * B[k + (size_t)j * n];
        worst = std::fmax(worst, std::fabs(C[i + (size_t)j * n] - r) / (1 + std::fabs(r)));
    }
    EXPECT(worst < 1e-3, "n=%d: largest relative error %g", n, worst);
    std::printf("GEMM sgemm %d events %.0f wall %.0f (GFLOP/s; %d reps, %.3f ms each by events)\n", n,
                flop / (ms / 1e3) / 1e9, flop / wall / 1e9, reps, ms / reps);
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h;
    CUBLAS(cublasCreate(&h));
    CUBLAS(cublasSetStream(h, s));
    bench(h, s, 64, 2000);
    bench(h, s, 1024, 200);
    bench(h, s, 4096, 20);
    CUBLAS(cublasDestroy(h));
    CHECK(cudaStreamDestroy(s));
    std::printf("rt_gemmbench: OK\n");
    return 0;
}

// cuBLAS: SGEMM (C = alpha A B + beta C, column-major, ragged sizes, one transposed operand) on a
// stream, against a double-precision CPU product.
#include "rt_common.h"
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

int main() {
    const int m = 300, n = 211, k = 517; // op(A) = A^T with A stored k x m
    const float alpha = 1.25f, beta = -0.5f;
    std::vector<float> A(k * m), B(k * n), C(m * n), R(m * n);
    unsigned x = 12345;
    auto rnd = [&] { x = x * 1103515245u + 12345u; return ((x >> 9) % 2001) / 1000.0f - 1.0f; };
    for (auto &v : A) v = rnd();
    for (auto &v : B) v = rnd();
    for (auto &v : C) v = rnd();
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)A[i * k + p] * B[j * k + p];
            R[j * m + i] = (float)(alpha * s + beta * C[j * m + i]);
        }
    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, A.size() * 4));
    CHECK(cudaMalloc(&dB, B.size() * 4));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cublasHandle_t h;
    CUBLAS(cublasCreate(&h));
    CUBLAS(cublasSetStream(h, s));
    CUBLAS(cublasSetMatrix(k, m, 4, A.data(), k, dA, k));
    CUBLAS(cublasSetMatrix(k, n, 4, B.data(), k, dB, k));
    CUBLAS(cublasSetMatrix(m, n, 4, C.data(), m, dC, m));
    CUBLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, k, dB, k, &beta, dC, m));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> G(m * n);
    CUBLAS(cublasGetMatrix(m, n, 4, dC, m, G.data(), m));
    double worst = 0;
    for (int i = 0; i < m * n; i++) worst = std::fmax(worst, std::fabs(G[i] - R[i]) / (1 + std::fabs(R[i])));
    EXPECT(worst < 1e-3, "largest relative error %g", worst); // TF32 is off by default for SGEMM
    CUBLAS(cublasDestroy(h));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    std::printf("rt_sgemm: OK (%dx%dx%d, worst relative error %.2g)\n", m, n, k, worst);
    return 0;
}

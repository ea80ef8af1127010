// Runtime API: vector add split over two streams with pinned memory, async copies, events
// (ordering and timing) and a device-to-device copy; every element checked on the CPU.
#include "rt_common.h"
#include <cmath>

__global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = (1 << 22) + 7, half = n / 2;
    float *ha, *hb, *hc;
    CHECK(cudaMallocHost(&ha, n * sizeof(float)));
    CHECK(cudaMallocHost(&hb, n * sizeof(float)));
    CHECK(cudaHostAlloc(&hc, n * sizeof(float), cudaHostAllocDefault));
    for (int i = 0; i < n; i++) {
        ha[i] = 0.5f * i;
        hb[i] = 1.0f - 0.25f * (i % 1000);
        hc[i] = -1;
    }
    float *da, *db, *dc, *dd;
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CHECK(cudaMalloc(&dd, n * sizeof(float)));
    cudaStream_t s[2];
    cudaEvent_t start, done[2];
    CHECK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&s[1]));
    CHECK(cudaEventCreate(&start));
    for (auto &e : done) CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(start, s[0]));
    for (int k = 0; k < 2; k++) {
        int off = k * half, cnt = k ? n - half : half;
        CHECK(cudaMemcpyAsync(da + off, ha + off, cnt * sizeof(float), cudaMemcpyHostToDevice, s[k]));
        CHECK(cudaMemcpyAsync(db + off, hb + off, cnt * sizeof(float), cudaMemcpyHostToDevice, s[k]));
        vadd<<<(cnt + 255) / 256, 256, 0, s[k]>>>(da + off, db + off, dc + off, cnt);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(done[k], s[k]));
    }
    // Stream 0 waits for stream 1's half before copying the whole result device to device.
    CHECK(cudaStreamWaitEvent(s[0], done[1], 0));
    CHECK(cudaMemcpyAsync(dd, dc, n * sizeof(float), cudaMemcpyDeviceToDevice, s[0]));
    CHECK(cudaMemcpyAsync(hc, dd, n * sizeof(float), cudaMemcpyDeviceToHost, s[0]));
    CHECK(cudaEventRecord(done[0], s[0]));
    CHECK(cudaEventSynchronize(done[0]));
    EXPECT(cudaEventQuery(done[0]) == cudaSuccess, "event not complete after synchronize");
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, done[0]));
    EXPECT(ms >= 0, "elapsed time %f", ms);
    for (int i = 0; i < n; i++)
        EXPECT(hc[i] == ha[i] + hb[i], "c[%d] = %f, want %f", i, hc[i], ha[i] + hb[i]);
    // Synchronous copies and a memset on the legacy default stream.
    CHECK(cudaMemset(dc, 0, n * sizeof(float)));
    CHECK(cudaMemcpy(hc, dc, 4096, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1024; i++) EXPECT(hc[i] == 0, "memset c[%d] = %f", i, hc[i]);
    CHECK(cudaDeviceSynchronize());
    for (auto &e : done) CHECK(cudaEventDestroy(e));
    CHECK(cudaEventDestroy(start));
    for (auto &x : s) CHECK(cudaStreamDestroy(x));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    CHECK(cudaFree(dd));
    CHECK(cudaFreeHost(ha));
    CHECK(cudaFreeHost(hb));
    CHECK(cudaFreeHost(hc));
    std::printf("rt_vecadd: OK (%d elements, %.3f ms)\n", n, ms);
    return 0;
}

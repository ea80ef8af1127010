// Runtime API: kernels taking many argument types by value (char, short, int64, double, float,
// a struct with padding, a large struct, pointers), each writing what it got back for the CPU.
#include "rt_common.h"
#include <cstdint>
#include <cstring>

struct Padded {
    char c;
    double d;
    short s;
};
struct Big {
    int v[40];
};

__global__ void scalars(char c, short s, int i, long long l, float f, double d, unsigned char u,
                        double *out) {
    out[0] = c;
    out[1] = s;
    out[2] = i;
    out[3] = (double)l;
    out[4] = f;
    out[5] = d;
    out[6] = u;
}

__global__ void structs(Padded p, Big b, const int *in, long long *out) {
    out[0] = p.c;
    out[1] = (long long)(p.d * 1000);
    out[2] = p.s;
    long long sum = 0;
    for (int k = 0; k < 40; k++) sum += b.v[k];
    out[3] = sum;
    out[4] = in[threadIdx.x];
}

__global__ void pointers(int **ptrs, int n) { // a device array of device pointers
    for (int k = 0; k < n; k++) *ptrs[k] = 100 + k;
}

int main() {
    double *dout, hout[7];
    CHECK(cudaMalloc(&dout, sizeof hout));
    scalars<<<1, 1>>>(-5, -3000, 123456789, -(1LL << 40) - 7, 1.5f, 3.25e100, 250, dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost));
    const double want[7] = {-5, -3000, 123456789, (double)(-(1LL << 40) - 7), 1.5, 3.25e100, 250};
    for (int k = 0; k < 7; k++) EXPECT(hout[k] == want[k], "scalar %d = %g, want %g", k, hout[k], want[k]);

    Padded p = {'x', 2.5, -7};
    Big b;
    long long bsum = 0;
    for (int k = 0; k < 40; k++) bsum += b.v[k] = k * k - 3;
    int hin[32], *din;
    for (int k = 0; k < 32; k++) hin[k] = 7 * k;
    CHECK(cudaMalloc(&din, sizeof hin));
    CHECK(cudaMemcpy(din, hin, sizeof hin, cudaMemcpyHostToDevice));
    long long *dl, hl[5];
    CHECK(cudaMalloc(&dl, sizeof hl));
    structs<<<1, 1>>>(p, b, din + 3, dl);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hl, dl, sizeof hl, cudaMemcpyDeviceToHost));
    EXPECT(hl[0] == 'x' && hl[1] == 2500 && hl[2] == -7, "padded struct: %lld %lld %lld", hl[0], hl[1], hl[2]);
    EXPECT(hl[3] == bsum, "big struct sum %lld, want %lld", hl[3], bsum);
    EXPECT(hl[4] == 21, "pointer argument read %lld, want 21", hl[4]);

    const int n = 4;
    int *targets, **dptrs, *hptrs[n], got[n];
    CHECK(cudaMalloc(&targets, n * sizeof(int)));
    for (int k = 0; k < n; k++) hptrs[k] = targets + (n - 1 - k);
    CHECK(cudaMalloc(&dptrs, sizeof hptrs));
    CHECK(cudaMemcpy(dptrs, hptrs, sizeof hptrs, cudaMemcpyHostToDevice));
    pointers<<<1, 1>>>(dptrs, n);
    CHECK(cudaMemcpy(got, targets, sizeof got, cudaMemcpyDeviceToHost));
    for (int k = 0; k < n; k++) EXPECT(got[n - 1 - k] == 100 + k, "pointer %d wrote %d", k, got[n - 1 - k]);
    CHECK(cudaFree(dout));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dl));
    CHECK(cudaFree(targets));
    CHECK(cudaFree(dptrs));
    std::printf("rt_args: OK\n");
    return 0;
}

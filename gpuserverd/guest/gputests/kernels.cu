// Kernels for the GPU test programs. Built by nvcc on the GPU machine into kernels.ptx (loaded by
// vecadd and gpubench, JIT-compiled by the driver) and kernels.cubin (loaded by matmul), so both
// image kinds go through cuModuleLoadData natively and through the guest library.
#define TILE 16

extern "C" __global__ void vecadd(const float *a, const float *b, float *c, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) c[i] = a[i] + b[i];
}

// C[m x n] = A[m x k] * B[k x n], row-major, tiled through shared memory; any sizes.
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int m, int n, int k) {
	__shared__ float As[TILE][TILE];
	__shared__ float Bs[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y;
	int col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.0f;
	for (int t = 0; t < (k + TILE - 1) / TILE; t++) {
		int ak = t * TILE + threadIdx.x, bk = t * TILE + threadIdx.y;
		As[threadIdx.y][threadIdx.x] = (row < m && ak < k) ? A[row * k + ak] : 0.0f;
		Bs[threadIdx.y][threadIdx.x] = (bk < k && col < n) ? B[bk * n + col] : 0.0f;
		__syncthreads();
		for (int j = 0; j < TILE; j++) acc += As[threadIdx.y][j] * Bs[j][threadIdx.x];
		__syncthreads();
	}
	if (row < m && col < n) C[row * n + col] = acc;
}

extern "C" __global__ void empty(void) {}

// spin busies every thread for about `cycles` SM clock cycles: a kernel of known length for the
// fair-share measurement (fairshare.c).
extern "C" __global__ void spin(long long cycles) {
	long long start = clock64();
	while (clock64() - start < cycles) {
	}
}

// copy16 copies n 16-byte words with every thread of the grid (pinbench.c: a copy whose source
// or destination is mapped host memory, read or written by the SMs instead of a copy engine).
extern "C" __global__ void copy16(uint4 *dst, const uint4 *src, size_t n) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

// matmul: a tiled matrix product on the GPU from a cubin module, on deliberately ragged sizes,
// checked against a double-precision CPU product. Usage: matmul [kernels.cubin] [m n k].
// Exit 0 on a correct result, 1 on a mismatch, 2 on a CUDA error.
#include <math.h>

#include "common.h"

#define TILE 16

int main(int argc, char **argv) {
	const char *path = argc > 1 ? argv[1] : "kernels.cubin";
	int m = 517, n = 389, k = 611;
	if (argc > 4) {
		m = atoi(argv[2]);
		n = atoi(argv[3]);
		k = atoi(argv[4]);
	}
	CUcontext ctx = open_device();
	void *image = read_file(path, NULL);
	CUmodule mod;
	CUfunction fn;
	CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&fn, mod, "matmul"));

	float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * k * n), *C = malloc(sizeof(float) * m * n);
	srand(7);
	for (int i = 0; i < m * k; i++) A[i] = (float)rand() / RAND_MAX - 0.5f;
	for (int i = 0; i < k * n; i++) B[i] = (float)rand() / RAND_MAX - 0.5f;
	CUdeviceptr dA, dB, dC;
	CHECK(cuMemAlloc(&dA, sizeof(float) * m * k));
	CHECK(cuMemAlloc(&dB, sizeof(float) * k * n));
	CHECK(cuMemAlloc(&dC, sizeof(float) * m * n));
	CHECK(cuMemcpyHtoD(dA, A, sizeof(float) * m * k));
	CHECK(cuMemcpyHtoD(dB, B, sizeof(float) * k * n));
	CHECK(cuMemsetD32(dC, 0x7fc00000u, (size_t)m * n)); // NaN

	CUstream s;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	void *params[] = {&dA, &dB, &dC, &m, &n, &k};
	CHECK(cuLaunchKernel(fn, (n + TILE - 1) / TILE, (m + TILE - 1) / TILE, 1, TILE, TILE, 1, 0, s, params, NULL));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuMemcpyDtoH(C, dC, sizeof(float) * m * n));

	long bad = 0;
	double worst = 0;
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < n; j++) {
			double want = 0;
			for (int p = 0; p < k; p++) want += (double)A[i * k + p] * B[p * n + j];
			double err = fabs(C[i * n + j] - want);
			if (!(err <= 1e-3)) { // also catches NaN
				if (bad < 5) fprintf(stderr, "C[%d][%d] = %g, want %g\n", i, j, C[i * n + j], want);
				bad++;
			}
			if (err > worst) worst = err;
		}
	}
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(dA));
	CHECK(cuMemFree(dB));
	CHECK(cuMemFree(dC));
	CHECK(cuModuleUnload(mod));
	(void)ctx;
	if (bad) {
		printf("matmul FAIL: %ld of %d elements wrong\n", bad, m * n);
		return 1;
	}
	printf("matmul OK: %dx%d * %dx%d, max abs error %.2e\n", m, k, k, n, worst);
	return 0;
}

// vecadd: c = a + b on the GPU from a PTX module, checked element by element against the CPU.
// Usage: vecadd [kernels.ptx] [n]. Exit 0 on a correct result, 1 on a mismatch, 2 on a CUDA error.
#include <math.h>
#include <string.h>

#include "common.h"

int main(int argc, char **argv) {
	const char *path = argc > 1 ? argv[1] : "kernels.ptx";
	int n = argc > 2 ? atoi(argv[2]) : (1 << 24) + 3; // not a multiple of the block size
	CUcontext ctx = open_device();
	void *image = read_file(path, NULL);
	CUmodule mod;
	CUfunction fn;
	CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&fn, mod, "vecadd"));

	size_t bytes = (size_t)n * sizeof(float);
	float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
	for (int i = 0; i < n; i++) {
		a[i] = (float)(i % 1000) * 0.5f;
		b[i] = (float)(i % 777) - 100.0f;
	}
	memset(c, 0xff, bytes);
	CUdeviceptr da, db, dc;
	CHECK(cuMemAlloc(&da, bytes));
	CHECK(cuMemAlloc(&db, bytes));
	CHECK(cuMemAlloc(&dc, bytes));
	CHECK(cuMemcpyHtoD(da, a, bytes));
	CHECK(cuMemcpyHtoD(db, b, bytes));
	CHECK(cuMemsetD32(dc, 0x7fc00000u, (size_t)n)); // NaN: an element the kernel skips shows

	void *params[] = {&da, &db, &dc, &n};
	unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
	CHECK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(c, dc, bytes));

	long bad = 0;
	for (int i = 0; i < n; i++) {
		if (c[i] != a[i] + b[i]) {
			if (bad < 5) fprintf(stderr, "c[%d] = %g, want %g\n", i, c[i], a[i] + b[i]);
			bad++;
		}
	}
	CHECK(cuMemFree(da));
	CHECK(cuMemFree(db));
	CHECK(cuMemFree(dc));
	CHECK(cuModuleUnload(mod));
	(void)ctx;
	if (bad) {
		printf("vecadd FAIL: %ld of %d elements wrong\n", bad, n);
		return 1;
	}
	printf("vecadd OK: %d elements\n", n);
	return 0;
}

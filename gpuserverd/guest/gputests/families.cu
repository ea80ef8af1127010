// The kernel families_test (gpuserverd/guest/tests/families_test.c) launches on a GPU: the
// simulator's built-in fill_u32, written for the device.
extern "C" __global__ void fill_u32(unsigned *p, unsigned v, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) p[i] = v;
}

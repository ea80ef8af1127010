// Kernels of migrate.c (scripts/gpu-migration.sh): a pattern every word of the session's bulk
// memory can be checked against, a step over a working buffer the host can follow, and a
// device variable counted up once per step (a module global kept across a move).

__device__ unsigned int counter;

__device__ __forceinline__ unsigned int pattern(unsigned long long i, unsigned int seed) {
	unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
	x ^= x >> 31;
	return (unsigned int)(x ^ (x >> 32));
}

extern "C" __global__ void fill(unsigned int *p, unsigned long long n, unsigned int seed) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = pattern(i, seed);
}

extern "C" __global__ void verify(const unsigned int *p, unsigned long long n, unsigned int seed, unsigned int *bad) {
	unsigned int mine = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		mine += p[i] != pattern(i, seed);
	if (mine) atomicAdd(bad, mine);
}

extern "C" __global__ void step(unsigned int *p, unsigned long long n) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = p[i] * 1664525u + 1013904223u;
	if (blockIdx.x == 0 && threadIdx.x == 0) counter++;
}

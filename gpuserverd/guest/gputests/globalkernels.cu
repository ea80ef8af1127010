// Kernels of globals.c (scripts/gpu-migration.sh, cases glob and globcp): state kept in module
// globals the driver places, which the host never asks the address of. Loaded as a fat binary,
// so gpuserverd cannot place them itself (backend/cuda/pinned.go): a move must carry their
// contents by name (backend/cuda/driverglobals.go), or they come back with their initial values.
// The Go tests' testdata (backend/cuda/testdata/globalkernels_gen.go) is built from this file too.

__device__ unsigned long long counter;             // .nv.global: zero at load
__device__ unsigned long long state[256] = {1, 2}; // .nv.global.init: the rest zero
__constant__ unsigned long long mult[4] = {6364136223846793005ull, 1442695040888963407ull,
                                           0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull};

// step advances every thread's state by one LCG step that also folds in the step counter, and
// copies the states and the new counter to out[0..256]. One block of 256 threads.
extern "C" __global__ void step(unsigned long long *out) {
	unsigned t = threadIdx.x;
	state[t] = state[t] * mult[t % 4] + counter + t;
	out[t] = state[t];
	__syncthreads();
	if (t == 0) out[256] = ++counter;
}

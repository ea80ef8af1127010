// globals MODULE GIB ITERS [STOPFILE]: a driver-API program whose kernel (globalkernels.cu,
// loaded from MODULE, a fat binary) keeps its state in __device__ variables and reads a
// __constant__ table, none of whose addresses it ever asks for. It steps ITERS times (or, with
// STOPFILE, until that file exists and at least ITERS steps ran), checking every step's output
// against its own model of the kernel: a session moved meanwhile whose globals came back with
// their initial values fails at once. GIB is ignored (migrate.c's arguments, so
// scripts/gpu-migration.sh runs either). It prints READY, and at the end
// "MIGRATE OK steps=N checksum=X max_step_ms=M".
#include "common.h"

#include <unistd.h>

#define THREADS 256

static const unsigned long long mult[4] = {6364136223846793005ull, 1442695040888963407ull,
                                           0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull};

static double now_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s MODULE GIB ITERS [STOPFILE]\n", argv[0]);
		return 2;
	}
	long iters = atol(argv[3]);
	const char *stop = argc > 4 ? argv[4] : NULL;
	open_device();
	CUmodule mod;
	CUfunction f;
	CHECK(cuModuleLoadData(&mod, read_file(argv[1], NULL)));
	CHECK(cuModuleGetFunction(&f, mod, "step"));
	CUdeviceptr out;
	CHECK(cuMemAlloc(&out, (THREADS + 1) * 8));
	unsigned long long model[THREADS] = {1, 2}, counter = 0, got[THREADS + 1];
	printf("READY\n");
	fflush(stdout);
	double worst = 0, last = now_ms();
	long step = 0;
	for (;;) {
		step++;
		void *args[] = {&out};
		CHECK(cuLaunchKernel(f, 1, 1, 1, THREADS, 1, 1, 0, NULL, args, NULL));
		CHECK(cuMemcpyDtoH(got, out, sizeof got));
		for (int t = 0; t < THREADS; t++) model[t] = model[t] * mult[t % 4] + counter + (unsigned)t;
		counter++;
		if (got[THREADS] != counter) {
			fprintf(stderr, "MIGRATE FAIL at step %ld: the __device__ counter reads %llu, want %llu\n", step, got[THREADS], counter);
			return 1;
		}
		for (int t = 0; t < THREADS; t++)
			if (got[t] != model[t]) {
				fprintf(stderr, "MIGRATE FAIL at step %ld: state[%d] reads %llx, want %llx\n", step, t, got[t], model[t]);
				return 1;
			}
		double now = now_ms();
		if (now - last > worst) worst = now - last;
		last = now;
		if (step >= iters && (!stop || access(stop, F_OK) == 0)) break;
		if (stop) usleep(2000);
	}
	unsigned sum = 0;
	for (int t = 0; t < THREADS; t++) sum = sum * 31 + (unsigned)(model[t] ^ model[t] >> 32);
	printf("MIGRATE OK steps=%ld checksum=%08x max_step_ms=%.1f\n", step, sum, worst);
	return 0;
}

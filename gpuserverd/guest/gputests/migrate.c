// migrate PTX GIB ITERS [STOPFILE]: a driver-API program that holds GIB GiB of device memory
// (1 GiB allocations filled with a pattern), plus a 64 MiB working buffer, 32 small allocations,
// a non-blocking stream, an event and a module global, and then steps ITERS times (or, with
// STOPFILE, until that file exists and at least ITERS steps ran), checking after every step what
// the GPU computed against the host's own model: sampled words of the working buffer, the global
// counter, a small allocation, and every 16 steps one whole 1 GiB allocation against its
// pattern. scripts/gpu-migration.sh moves its session between servers (or checkpoints, restores,
// restarts gpuserverd) meanwhile; the program must not notice. It prints READY once its memory
// is filled, and at the end "MIGRATE OK steps=N checksum=X max_step_ms=M" (the checksum is of
// the sampled words, so a run of the same steps anywhere prints the same one).
#include "common.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAMPLES 64
#define SMALL 32
#define WORK_WORDS (16u << 20)

static CUfunction f_fill, f_verify, f_step;

static double now_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned pattern(unsigned long long i, unsigned seed) {
	unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
	x ^= x >> 31;
	return (unsigned)(x ^ (x >> 32));
}

static void launch(CUfunction f, CUstream s, void **args) {
	CHECK(cuLaunchKernel(f, 1024, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void fail(const char *what, long step, unsigned long long got, unsigned long long want) {
	fprintf(stderr, "MIGRATE FAIL at step %ld: %s: got %llu, want %llu\n", step, what, got, want);
	exit(1);
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s PTX GIB ITERS [STOPFILE]\n", argv[0]);
		return 2;
	}
	int gib = atoi(argv[2]);
	long iters = atol(argv[3]);
	const char *stop = argc > 4 ? argv[4] : NULL;
	open_device();
	CUmodule mod;
	CHECK(cuModuleLoadData(&mod, read_file(argv[1], NULL)));
	CHECK(cuModuleGetFunction(&f_fill, mod, "fill"));
	CHECK(cuModuleGetFunction(&f_verify, mod, "verify"));
	CHECK(cuModuleGetFunction(&f_step, mod, "step"));
	CUdeviceptr counter;
	size_t csize;
	CHECK(cuModuleGetGlobal(&counter, &csize, mod, "counter"));
	CHECK(cuMemsetD32(counter, 0, 1));
	CUstream s;
	CUevent done;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));

	const unsigned long long words = (1ull << 30) / 4;
	CUdeviceptr *bulk = calloc((size_t)gib + 1, sizeof *bulk);
	for (int i = 0; i < gib; i++) {
		CHECK(cuMemAlloc(&bulk[i], 1ull << 30));
		unsigned seed = (unsigned)i + 1;
		unsigned long long n = words;
		void *args[] = {&bulk[i], &n, &seed};
		launch(f_fill, s, args);
	}
	CUdeviceptr work, bad, small[SMALL];
	CHECK(cuMemAlloc(&work, WORK_WORDS * 4ull));
	CHECK(cuMemAlloc(&bad, 4));
	for (int i = 0; i < SMALL; i++) {
		CHECK(cuMemAlloc(&small[i], 1000));
		CHECK(cuMemsetD32(small[i], 0, 250));
	}
	unsigned seed0 = 0x5eed;
	unsigned long long wn = WORK_WORDS;
	void *fargs[] = {&work, &wn, &seed0};
	launch(f_fill, s, fargs);
	unsigned model[SAMPLES];
	unsigned long long at[SAMPLES];
	for (int i = 0; i < SAMPLES; i++) {
		at[i] = (unsigned long long)i * (WORK_WORDS / SAMPLES) + (unsigned)(i * 7919) % 1024;
		model[i] = pattern(at[i], seed0);
	}
	CHECK(cuStreamSynchronize(s));
	printf("READY %d GiB\n", gib);
	fflush(stdout);

	double worst = 0, last = now_ms();
	long step = 0;
	for (;;) {
		step++;
		void *sargs[] = {&work, &wn};
		launch(f_step, s, sargs);
		CHECK(cuMemsetD32Async(small[step % SMALL], (unsigned)step, 250, s));
		CHECK(cuEventRecord(done, s));
		CHECK(cuEventSynchronize(done));
		for (int i = 0; i < SAMPLES; i++) {
			unsigned v;
			model[i] = model[i] * 1664525u + 1013904223u;
			CHECK(cuMemcpyDtoH(&v, work + at[i] * 4, 4));
			if (v != model[i]) fail("working buffer word", step, v, model[i]);
		}
		unsigned c, sv;
		CHECK(cuMemcpyDtoH(&c, counter, 4));
		if (c != (unsigned)step) fail("global counter", step, c, (unsigned long long)step);
		CHECK(cuMemcpyDtoH(&sv, small[step % SMALL] + 996, 4));
		if (sv != (unsigned)step) fail("small allocation", step, sv, (unsigned long long)step);
		if (gib > 0 && step % 16 == 0) {
			int i = (int)((step / 16) % gib);
			unsigned seed = (unsigned)i + 1, nbad;
			unsigned long long n = words;
			CHECK(cuMemsetD32(bad, 0, 1));
			void *vargs[] = {&bulk[i], &n, &seed, &bad};
			launch(f_verify, s, vargs);
			CHECK(cuStreamSynchronize(s));
			CHECK(cuMemcpyDtoH(&nbad, bad, 4));
			if (nbad) fail("words of a 1 GiB allocation off its pattern", step, nbad, 0);
		}
		double t = now_ms();
		if (t - last > worst) worst = t - last;
		last = t;
		if (step >= iters && (!stop || access(stop, F_OK) == 0)) break;
		if (stop) usleep(2000);
	}
	for (int i = 0; i < gib; i++) {
		unsigned seed = (unsigned)i + 1, nbad;
		unsigned long long n = words;
		CHECK(cuMemsetD32(bad, 0, 1));
		void *vargs[] = {&bulk[i], &n, &seed, &bad};
		launch(f_verify, s, vargs);
		CHECK(cuStreamSynchronize(s));
		CHECK(cuMemcpyDtoH(&nbad, bad, 4));
		if (nbad) fail("words of a 1 GiB allocation off its pattern at the end", step, nbad, 0);
	}
	unsigned sum = 0;
	for (int i = 0; i < SAMPLES; i++) sum = sum * 31 + model[i];
	printf("MIGRATE OK steps=%ld checksum=%08x max_step_ms=%.1f\n", step, sum, worst);
	return 0;
}

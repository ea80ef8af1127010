// gpubench: driver-API micro-benchmarks. Prints one line per row:
//   BENCH <row> <best> <median> <unit>
// Copies are GB/s (1e9 bytes/s; best = highest), times are microseconds (best = lowest). A line
// starting with "# " is a note: the physical layout of a 64 MiB pinned buffer's pages (root only).
// Usage: gpubench [kernels.ptx] [quick|launch]. "quick" runs fewer repetitions (for smoke tests);
// "launch" only the launch rows and the pinned 64 MiB copies, in full (scripts/gpu-launch.sh
// runs it many times, interleaving builds).
#include <string.h>

#include "common.h"

static int quick;

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n) {
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// report prints a row from per-repetition samples; higher_is_better picks what "best" means.
static void report(const char *row, double *v, int n, const char *unit, int higher_is_better) {
	double med = median(v, n);
	double best = higher_is_better ? v[n - 1] : v[0];
	printf("BENCH %s %.3f %.3f %s\n", row, best, med, unit);
	fflush(stdout);
}

enum { H2D, D2H };
// Host memory kinds: cuMemAllocHost, malloc'd page-aligned memory registered with
// cuMemHostRegister, and plain malloc'd (pageable) memory.
enum { PINNED, REGISTERED, PAGEABLE };
static const char *kind_name[] = {"pinned", "registered", "pageable"};

static void bench_copy(int dir, int kind, size_t mib) {
	size_t bytes = mib << 20;
	int reps = mib <= 1 ? 50 : mib <= 8 ? 20 : mib <= 64 ? 10 : 5;
	if (quick) reps = 3;
	void *host;
	if (kind == PINNED) {
		CHECK(cuMemAllocHost(&host, bytes));
	} else {
		host = kind == REGISTERED ? aligned_alloc(4096, bytes) : malloc(bytes);
		if (!host) exit(2);
	}
	memset(host, 1, bytes); // fault the pages in before timing
	if (kind == PINNED && mib >= 64) printf("# %s_pinned_%zuMiB: host pages in %ld physically contiguous runs\n", dir == H2D ? "h2d" : "d2h", mib, phys_runs(host, bytes));
	if (kind == REGISTERED) CHECK(cuMemHostRegister(host, bytes, 0));
	CUdeviceptr dev;
	CHECK(cuMemAlloc(&dev, bytes));
	double v[64];
	for (int r = -1; r < reps; r++) { // r = -1 warms up
		double t0 = now_s();
		if (dir == H2D)
			CHECK(cuMemcpyHtoD(dev, host, bytes));
		else
			CHECK(cuMemcpyDtoH(host, dev, bytes));
		CHECK(cuCtxSynchronize());
		double dt = now_s() - t0;
		if (r >= 0) v[r] = (double)bytes / dt / 1e9;
	}
	char row[64];
	snprintf(row, sizeof row, "%s_%s_%zuMiB", dir == H2D ? "h2d" : "d2h", kind_name[kind], mib);
	report(row, v, reps, "GB/s", 1);
	CHECK(cuMemFree(dev));
	if (kind == PINNED) {
		CHECK(cuMemFreeHost(host));
		return;
	}
	if (kind == REGISTERED) CHECK(cuMemHostUnregister(host));
	free(host);
}

// What registering costs: cuMemHostRegister + cuMemHostUnregister of 64 MiB of touched memory
// (the driver pins the pages; through gpucloud's shared memory the pages are copied into the
// arena and back).
static void bench_register(void) {
	size_t bytes = 64u << 20;
	int reps = quick ? 3 : 10;
	double v[16];
	void *host = aligned_alloc(4096, bytes);
	if (!host) exit(2);
	memset(host, 1, bytes);
	for (int r = -1; r < reps; r++) {
		double t0 = now_s();
		CHECK(cuMemHostRegister(host, bytes, 0));
		CHECK(cuMemHostUnregister(host));
		if (r >= 0) v[r] = (now_s() - t0) * 1e6;
	}
	report("register_unregister_64MiB", v, reps, "us", 0);
	free(host);
}

// Async launch rate: many empty launches queued back to back, then one synchronise.
static void bench_launch_async(CUfunction empty) {
	int batch = quick ? 1000 : 10000, reps = quick ? 2 : 7;
	double v[16];
	CUstream s;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int r = -1; r < reps; r++) {
		double t0 = now_s();
		for (int i = 0; i < batch; i++) CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
		CHECK(cuStreamSynchronize(s));
		double dt = now_s() - t0;
		if (r >= 0) v[r] = dt / batch * 1e6;
	}
	report("launch_async", v, reps, "us", 0);
	CHECK(cuStreamDestroy(s));
}

// Round trip: one launch, then wait for it (what a program that synchronises every step pays).
static void bench_launch_sync(CUfunction empty) {
	enum { N = 2000 };
	int n = quick ? 100 : N;
	static double v[N];
	for (int i = -10; i < n; i++) {
		double t0 = now_s();
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
		CHECK(cuCtxSynchronize());
		if (i >= 0) v[i] = (now_s() - t0) * 1e6;
	}
	report("launch_sync", v, n, "us", 0);
}

static void bench_alloc_free(void) {
	enum { N = 1000 };
	int n = quick ? 100 : N;
	static double v[N];
	for (int i = -10; i < n; i++) {
		CUdeviceptr p;
		double t0 = now_s();
		CHECK(cuMemAlloc(&p, 1 << 20));
		CHECK(cuMemFree(p));
		if (i >= 0) v[i] = (now_s() - t0) * 1e6;
	}
	report("alloc_free_1MiB", v, n, "us", 0);
}

int main(int argc, char **argv) {
	const char *path = argc > 1 ? argv[1] : "kernels.ptx";
	quick = argc > 2 && strcmp(argv[2], "quick") == 0;
	int launch_only = argc > 2 && strcmp(argv[2], "launch") == 0;
	open_device();
	CUmodule mod;
	CUfunction empty;
	CHECK(cuModuleLoadData(&mod, read_file(path, NULL)));
	CHECK(cuModuleGetFunction(&empty, mod, "empty"));

	static const size_t sizes[] = {1, 8, 64, 256};
	if (launch_only) {
		bench_copy(H2D, PINNED, 64);
		bench_copy(D2H, PINNED, 64);
	} else {
		for (int kind = PINNED; kind <= PAGEABLE; kind++)
			for (int dir = H2D; dir <= D2H; dir++)
				for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) bench_copy(dir, kind, sizes[i]);
		bench_register();
	}
	bench_launch_async(empty);
	bench_launch_sync(empty);
	if (!launch_only) bench_alloc_free();
	CHECK(cuModuleUnload(mod));
	return 0;
}

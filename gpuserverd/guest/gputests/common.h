// Shared by the driver-API test programs: error checks, module loading, a primary context.
// They use only the driver API (cuda.h, -lcuda), so the same binary runs on the real libcuda.so.1
// and, with LD_LIBRARY_PATH pointing at gpucloud's guest library, on a remote GPU.
#ifndef GPUTESTS_COMMON_H
#define GPUTESTS_COMMON_H

#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                                \
	do {                                                                                           \
		CUresult r_ = (call);                                                                      \
		if (r_ != CUDA_SUCCESS) {                                                                  \
			const char *name_ = NULL;                                                              \
			cuGetErrorName(r_, &name_);                                                            \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,               \
			        name_ ? name_ : "?", (int)r_);                                                  \
			exit(2);                                                                               \
		}                                                                                          \
	} while (0)

static inline void *read_file(const char *path, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "%s: read failed\n", path);
		exit(2);
	}
	buf[n] = 0; // PTX is read as a C string
	fclose(f);
	if (len) *len = (size_t)n;
	return buf;
}

// open_device initialises the driver and makes device 0's primary context current. The primary
// context keeps the programs independent of cuCtxCreate's version (_v2, _v3, _v4 across CUDA 12/13).
static inline CUcontext open_device(void) {
	CUdevice dev;
	CUcontext ctx;
	char name[256];
	int drv = 0;
	CHECK(cuInit(0));
	CHECK(cuDriverGetVersion(&drv));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetName(name, sizeof name, dev));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	fprintf(stderr, "device 0: %s, driver API %d\n", name, drv);
	return ctx;
}

static inline double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// phys_runs counts the physically contiguous runs of the 4 KiB pages of [p, p+n) from
// /proc/self/pagemap (-1 where it cannot tell: not root, pages not present): scattered pages give
// about n/4096 runs, whole huge pages n/2 MiB. Pinned copies are timed against it (pinbench,
// gpubench): whether the layout of host pages changes what the device's copy engine reads.
static inline long phys_runs(const void *p, size_t n) {
	int fd = open("/proc/self/pagemap", O_RDONLY);
	if (fd < 0) return -1;
	long runs = 0;
	uint64_t prev = 0;
	for (size_t off = 0; off < n; off += 4096) {
		uint64_t e;
		if (pread(fd, &e, 8, (off_t)(((uintptr_t)p + off) / 4096 * 8)) != 8) {
			runs = -1;
			break;
		}
		uint64_t pfn = e & ((1ULL << 55) - 1);
		if (!(e >> 63) || pfn == 0) { /* not present, or the kernel hides frame numbers */
			runs = -1;
			break;
		}
		if (off == 0 || pfn != prev + 1) runs++;
		prev = pfn;
	}
	close(fd);
	return runs;
}

#endif

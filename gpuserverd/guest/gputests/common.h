// Shared by the driver-API test programs: error checks, module loading, a primary context.
// They use only the driver API (cuda.h, -lcuda), so the same binary runs on the real libcuda.so.1
// and, with LD_LIBRARY_PATH pointing at gpucloud's guest library, on a remote GPU.
#ifndef GPUTESTS_COMMON_H
#define GPUTESTS_COMMON_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

#endif

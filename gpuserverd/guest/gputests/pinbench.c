// pinbench: where a pinned 64 MiB copy's time goes, natively. The device DMAs from and to host
// memory of several kinds, each copied several ways, interleaved over rounds so that the
// machine's noise hits each alike. The kinds model what gpucloud's worker copies from: its shared
// arena is a memfd mapped shared and registered with cuMemHostRegister, where a native program's
// pinned buffer is cuMemAllocHost's. Prints one line per kind, way and direction:
//   PIN <kind> <way> <h2d|d2h> <median of the rounds' medians, GB/s> <best round's median>
// Usage: pinbench [kernels.ptx] [MiB] [rounds] [reps per round]
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif
#define HUGE_2M (2u << 20)

enum kind { PINNED, ANON, ANON_THP, MEMFD, MEMFD_PORTABLE, MEMFD_THP, MEMFD_HUGETLB, NKINDS };
static const char *kind_name[] = {"cuMemAllocHost", "anon-reg", "anon-thp-reg", "memfd-reg", "memfd-reg-noDEVICEMAP", "memfd-thp-reg", "memfd-hugetlb-reg"};
enum way { SYNC, ASYNC_STREAM, SPLIT2, SPLIT4, DTOD, KERNEL, NWAYS };
static const char *way_name[] = {"sync", "async", "split2", "split4", "dtod", "kernel"};

struct buf {
	void *host;
	CUdeviceptr devmap; // the device's address of the host bytes (0: none)
	int ok;
};

static size_t bytes;
static CUdeviceptr dev;
static CUstream streams[4];
static CUfunction copy16;

// aligned_map reserves 2 MiB-aligned room so that a huge page can back it, then maps there.
static void *aligned_map(int fd, int flags) {
	size_t room = bytes + HUGE_2M;
	char *r = mmap(NULL, room, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED) return NULL;
	char *a = (char *)(((uintptr_t)r + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
	void *p = mmap(a, bytes, PROT_READ | PROT_WRITE, flags | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) return NULL;
	return p;
}

static struct buf make(enum kind k) {
	struct buf b = {0};
	int fd = -1;
	unsigned reg = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
	switch (k) {
	case PINNED:
		if (cuMemAllocHost(&b.host, bytes) != CUDA_SUCCESS) return b;
		break;
	case ANON:
	case ANON_THP:
		b.host = aligned_map(-1, MAP_PRIVATE | MAP_ANONYMOUS);
		if (b.host) madvise(b.host, bytes, k == ANON_THP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
		break;
	case MEMFD:
	case MEMFD_PORTABLE:
	case MEMFD_THP:
	case MEMFD_HUGETLB:
		fd = memfd_create("pinbench", MFD_CLOEXEC | (k == MEMFD_HUGETLB ? MFD_HUGETLB : 0));
		if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
			fprintf(stderr, "%s: memfd: %s\n", kind_name[k], strerror(errno));
			if (fd >= 0) close(fd);
			return b;
		}
		b.host = aligned_map(fd, MAP_SHARED);
		if (b.host && k == MEMFD_THP) madvise(b.host, bytes, MADV_HUGEPAGE);
		if (k == MEMFD_PORTABLE) reg = CU_MEMHOSTREGISTER_PORTABLE;
		break;
	default:
		return b;
	}
	if (!b.host) {
		fprintf(stderr, "%s: mapping failed: %s\n", kind_name[k], strerror(errno));
		return b;
	}
	memset(b.host, 1, bytes); // fault the pages in, as MAP_POPULATE does for the arena
	if (fd >= 0) close(fd);
	if (k != PINNED) {
		CUresult r = cuMemHostRegister(b.host, bytes, reg);
		if (r != CUDA_SUCCESS) {
			fprintf(stderr, "%s: cuMemHostRegister: %d\n", kind_name[k], (int)r);
			return b;
		}
	}
	if (cuMemHostGetDevicePointer(&b.devmap, b.host, 0) != CUDA_SUCCESS) b.devmap = 0;
	b.ok = 1;
	fprintf(stderr, "%-22s at %p, device address %#llx, physically contiguous runs %ld\n", kind_name[k], b.host,
	        (unsigned long long)b.devmap, phys_runs(b.host, bytes));
	return b;
}

// copy moves bytes one way, one of the ways; returns 0 when that way does not apply.
static int copy(struct buf *b, enum way w, int h2d) {
	switch (w) {
	case SYNC:
		CHECK(h2d ? cuMemcpyHtoD(dev, b->host, bytes) : cuMemcpyDtoH(b->host, dev, bytes));
		break;
	case ASYNC_STREAM:
		CHECK(h2d ? cuMemcpyHtoDAsync(dev, b->host, bytes, streams[0]) : cuMemcpyDtoHAsync(b->host, dev, bytes, streams[0]));
		break;
	case SPLIT2:
	case SPLIT4: {
		int n = w == SPLIT2 ? 2 : 4;
		size_t part = bytes / (size_t)n;
		for (int i = 0; i < n; i++) {
			char *h = (char *)b->host + (size_t)i * part;
			CUdeviceptr d = dev + (size_t)i * part;
			CHECK(h2d ? cuMemcpyHtoDAsync(d, h, part, streams[i]) : cuMemcpyDtoHAsync(h, d, part, streams[i]));
		}
		break;
	}
	case DTOD:
		if (!b->devmap) return 0;
		CHECK(h2d ? cuMemcpyDtoD(dev, b->devmap, bytes) : cuMemcpyDtoD(b->devmap, dev, bytes));
		break;
	case KERNEL: {
		if (!b->devmap || !copy16) return 0;
		CUdeviceptr dst = h2d ? dev : b->devmap, src = h2d ? b->devmap : dev;
		size_t n16 = bytes / 16;
		void *args[] = {&dst, &src, &n16};
		CHECK(cuLaunchKernel(copy16, 132 * 8, 1, 1, 512, 1, 1, 0, NULL, args, NULL));
		break;
	}
	default:
		return 0;
	}
	CHECK(cuCtxSynchronize());
	return 1;
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n) {
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void print_settings(void) {
	static const char *files[] = {"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/shmem_enabled",
	                              "/proc/sys/vm/nr_hugepages"};
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		char line[256] = "?";
		FILE *f = fopen(files[i], "r");
		if (f) {
			if (!fgets(line, sizeof line, f)) strcpy(line, "?");
			fclose(f);
		}
		line[strcspn(line, "\n")] = 0;
		fprintf(stderr, "%s: %s\n", files[i], line);
	}
}

int main(int argc, char **argv) {
	const char *ptx = argc > 1 ? argv[1] : "kernels.ptx";
	size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 64;
	int rounds = argc > 3 ? atoi(argv[3]) : 7, reps = argc > 4 ? atoi(argv[4]) : 15;
	if (rounds < 1 || rounds > 64 || reps < 1 || reps > 256 || mib < 1) return 2;
	bytes = mib << 20;
	CUcontext ctx = open_device();
	(void)ctx;
	CUdevice d0;
	int engines = 0;
	CHECK(cuDeviceGet(&d0, 0));
	CHECK(cuDeviceGetAttribute(&engines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, d0));
	fprintf(stderr, "async engines: %d\n", engines);
	print_settings();
	CUmodule mod;
	if (cuModuleLoadData(&mod, read_file(ptx, NULL)) != CUDA_SUCCESS || cuModuleGetFunction(&copy16, mod, "copy16") != CUDA_SUCCESS)
		copy16 = NULL;
	CHECK(cuMemAlloc(&dev, bytes));
	for (int i = 0; i < 4; i++) CHECK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
	struct buf bufs[NKINDS];
	for (int k = 0; k < NKINDS; k++) bufs[k] = make((enum kind)k);

	// per[k][w][dir][round]: the round's median GB/s
	static double per[NKINDS][NWAYS][2][64];
	static int applies[NKINDS][NWAYS];
	double *v = malloc(sizeof(double) * (size_t)reps);
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < NKINDS; k++) {
			if (!bufs[k].ok) continue;
			for (int w = 0; w < NWAYS; w++)
				for (int dir = 0; dir < 2; dir++) {
					if (!copy(&bufs[k], (enum way)w, dir == 0)) continue; // also the warm-up
					applies[k][w] = 1;
					for (int i = 0; i < reps; i++) {
						double t0 = now_s();
						copy(&bufs[k], (enum way)w, dir == 0);
						v[i] = (double)bytes / (now_s() - t0) / 1e9;
					}
					per[k][w][dir][r] = median(v, reps);
				}
		}
	for (int k = 0; k < NKINDS; k++)
		for (int w = 0; w < NWAYS; w++)
			for (int dir = 0; dir < 2; dir++) {
				if (!applies[k][w]) continue;
				double *m = per[k][w][dir];
				double med = median(m, rounds); // sorts: m[rounds-1] is the best round
				printf("PIN %s %s %s %.2f %.2f\n", kind_name[k], way_name[w], dir == 0 ? "h2d" : "d2h", med, m[rounds - 1]);
			}
	return 0;
}

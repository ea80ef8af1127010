// Run-time binding to NVIDIA's NCCL (see nccl.h). Untested on GPUs.
#include "nccl.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *ncclComm_t;
#define NCCL_INTERNAL_ERROR 3

#define NCCL_SYMBOLS(X)                                                                            \
	X(init_all, "ncclCommInitAll", int (*)(ncclComm_t *, int, const int *))                        \
	X(destroy, "ncclCommDestroy", int (*)(ncclComm_t))                                             \
	X(group_start, "ncclGroupStart", int (*)(void))                                                \
	X(group_end, "ncclGroupEnd", int (*)(void))                                                    \
	X(all_reduce, "ncclAllReduce",                                                                 \
	  int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))                       \
	X(broadcast, "ncclBroadcast", int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream)) \
	X(reduce, "ncclReduce", int (*)(const void *, void *, size_t, int, int, int, ncclComm_t, CUstream)) \
	X(all_gather, "ncclAllGather", int (*)(const void *, void *, size_t, int, ncclComm_t, CUstream)) \
	X(reduce_scatter, "ncclReduceScatter",                                                         \
	  int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))                       \
	X(error_string, "ncclGetErrorString", const char *(*)(int))

static struct {
	NCCL_SYMBOLS(GC_DL_DECLARE)
} nc;

int gc_nccl_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	if (dlsym(h, "gpucloud_nccl_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libnccl, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
	__typeof__(nc) t;
	memset(&t, 0, sizeof t);
	NCCL_SYMBOLS(GC_DL_RESOLVE)
	nc = t;
	return 0;
}

int gc_nccl_init_all(void **comms, int n, const int *devs) { return nc.init_all(comms, n, devs); }
int gc_nccl_destroy(void *comm) { return nc.destroy(comm); }
const char *gc_nccl_error_string(int r) { return nc.error_string ? nc.error_string(r) : "NCCL not loaded"; }

int gc_nccl_run(int kind, int n, void **comms, CUcontext *ctxs, CUstream *streams, const uint64_t *send,
                const uint64_t *recv, size_t count, int dt, int op, int root) {
	int rc = nc.group_start();
	for (int i = 0; rc == 0 && i < n; i++) {
		if (gc_bind(ctxs[i]) != 0) {
			rc = NCCL_INTERNAL_ERROR;
			break;
		}
		const void *s = (const void *)(uintptr_t)send[i];
		void *r = (void *)(uintptr_t)recv[i];
		switch (kind) {
		case 0: rc = nc.all_reduce(s, r, count, dt, op, comms[i], streams[i]); break;
		case 1: rc = nc.broadcast(s, r, count, dt, root, comms[i], streams[i]); break;
		case 2: rc = nc.reduce(s, r, count, dt, op, root, comms[i], streams[i]); break;
		case 3: rc = nc.all_gather(s, r, count, dt, comms[i], streams[i]); break;
		case 4: rc = nc.reduce_scatter(s, r, count, dt, op, comms[i], streams[i]); break;
		default: rc = NCCL_INTERNAL_ERROR;
		}
	}
	int end = nc.group_end(); // always closes the group, even after a failed part
	return rc ? rc : end;
}

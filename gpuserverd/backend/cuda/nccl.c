// Run-time binding to NVIDIA's NCCL (see nccl.h).
#include "nccl.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *ncclComm_t;
typedef struct {
	char internal[GC_NCCL_ID_BYTES];
} ncclUniqueId;
#define NCCL_INTERNAL_ERROR 3
#define NCCL_INVALID_USAGE 5

#define NCCL_SYMBOLS(X)                                                                            \
	X(unique_id, "ncclGetUniqueId", int (*)(ncclUniqueId *))                                       \
	X(init_rank, "ncclCommInitRank", int (*)(ncclComm_t *, int, ncclUniqueId, int))                \
	X(destroy, "ncclCommDestroy", int (*)(ncclComm_t))                                             \
	X(abort_, "ncclCommAbort", int (*)(ncclComm_t))                                                \
	X(finalize, "ncclCommFinalize", int (*)(ncclComm_t))                                           \
	X(async_error, "ncclCommGetAsyncError", int (*)(ncclComm_t, int *))                            \
	X(group_start, "ncclGroupStart", int (*)(void))                                                \
	X(group_end, "ncclGroupEnd", int (*)(void))                                                    \
	X(all_reduce, "ncclAllReduce",                                                                 \
	  int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))                       \
	X(broadcast, "ncclBroadcast", int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream)) \
	X(reduce, "ncclReduce", int (*)(const void *, void *, size_t, int, int, int, ncclComm_t, CUstream)) \
	X(all_gather, "ncclAllGather", int (*)(const void *, void *, size_t, int, ncclComm_t, CUstream)) \
	X(reduce_scatter, "ncclReduceScatter",                                                         \
	  int (*)(const void *, void *, size_t, int, int, ncclComm_t, CUstream))                       \
	X(send, "ncclSend", int (*)(const void *, size_t, int, int, ncclComm_t, CUstream))             \
	X(recv, "ncclRecv", int (*)(void *, size_t, int, int, ncclComm_t, CUstream))                   \
	X(premul, "ncclRedOpCreatePreMulSum", int (*)(int *, void *, int, int, ncclComm_t))            \
	X(redop_destroy, "ncclRedOpDestroy", int (*)(int, ncclComm_t))                                 \
	X(split, "ncclCommSplit", int (*)(ncclComm_t, int, int, ncclComm_t *, void *))                 \
	X(user_rank, "ncclCommUserRank", int (*)(ncclComm_t, int *))                                   \
	X(count, "ncclCommCount", int (*)(ncclComm_t, int *))                                          \
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

const char *gc_nccl_error_string(int r) { return nc.error_string ? nc.error_string(r) : "NCCL not loaded"; }

int gc_nccl_unique_id(unsigned char id[GC_NCCL_ID_BYTES]) {
	ncclUniqueId u;
	int rc = nc.unique_id(&u);
	if (rc == 0) memcpy(id, u.internal, sizeof u.internal);
	return rc;
}

int gc_nccl_init_rank(CUcontext ctx, void **comm, int nranks, const unsigned char id[GC_NCCL_ID_BYTES], int rank) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	ncclUniqueId u;
	memcpy(u.internal, id, sizeof u.internal);
	return nc.init_rank((ncclComm_t *)comm, nranks, u, rank);
}

int gc_nccl_group_start(void) { return nc.group_start(); }
int gc_nccl_group_end(void) { return nc.group_end(); }

int gc_nccl_post(CUcontext ctx, void *comm, int kind, uint64_t send, uint64_t recv, size_t count, int dt, int op,
                 int peer, CUstream st) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	const void *s = (const void *)(uintptr_t)send;
	void *r = (void *)(uintptr_t)recv;
	switch (kind) {
	case 0: return nc.all_reduce(s, r, count, dt, op, comm, st);
	case 1: return nc.broadcast(s, r, count, dt, peer, comm, st);
	case 2: return nc.reduce(s, r, count, dt, op, peer, comm, st);
	case 3: return nc.all_gather(s, r, count, dt, comm, st);
	case 4: return nc.reduce_scatter(s, r, count, dt, op, comm, st);
	case 5: return nc.send(s, count, dt, peer, comm, st);
	case 6: return nc.recv(r, count, dt, peer, comm, st);
	default: return NCCL_INVALID_USAGE;
	}
}

int gc_nccl_comm(CUcontext ctx, void *comm, int what, int *async) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	switch (what) {
	case 0: return nc.async_error(comm, async);
	case 1: return nc.finalize(comm);
	case 2: return nc.destroy(comm);
	case 3: return nc.abort_(comm);
	default: return NCCL_INVALID_USAGE;
	}
}

int gc_nccl_premul(CUcontext ctx, void *comm, int *op, void *host, uint64_t dev, int dt) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	// ncclScalarHostImmediate (1) reads host during the call; ncclScalarDevice (0) at each use.
	return host ? nc.premul(op, host, dt, 1, comm) : nc.premul(op, (void *)(uintptr_t)dev, dt, 0, comm);
}

int gc_nccl_redop_destroy(CUcontext ctx, void *comm, int op) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	return nc.redop_destroy(op, comm);
}

int gc_nccl_split(CUcontext ctx, void *comm, int color, int key, void **out, int *rank, int *nranks) {
	if (gc_bind(ctx) != 0) return NCCL_INTERNAL_ERROR;
	*out = NULL;
	int rc = nc.split(comm, color, key, (ncclComm_t *)out, NULL);
	if (rc != 0 || *out == NULL) return rc;
	rc = nc.user_rank(*out, rank);
	return rc ? rc : nc.count(*out, nranks);
}

// Run-time binding to NVIDIA's cuDNN (see dnn.h).
#include "dnn.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CUDNN_STATUS_BAD_PARAM 2000
#define CUDNN_STATUS_NOT_SUPPORTED 3000
#define CUDNN_STATUS_INTERNAL_ERROR 4000

typedef void *dd; // any cuDNN descriptor or handle
typedef const void *cp;

// The algorithm-result struct all three convolution directions share (cudnn_cnn.h).
struct perf {
	int algo, status;
	float time;
	size_t memory;
	int determinism, math_type, reserved[3];
};

#define DNN_SYMBOLS(X)                                                                              \
	X(create, "cudnnCreate", int (*)(dd *))                                                         \
	X(destroy, "cudnnDestroy", int (*)(dd))                                                         \
	X(set_stream, "cudnnSetStream", int (*)(dd, CUstream))                                          \
	X(bcreate, "cudnnBackendCreateDescriptor", int (*)(int, dd *))                                  \
	X(bdestroy, "cudnnBackendDestroyDescriptor", int (*)(dd))                                       \
	X(bset, "cudnnBackendSetAttribute", int (*)(dd, int, int, int64_t, cp))                          \
	X(bget, "cudnnBackendGetAttribute", int (*)(dd, int, int, int64_t, int64_t *, void *))           \
	X(bfinalize, "cudnnBackendFinalize", int (*)(dd))                                               \
	X(bexecute, "cudnnBackendExecute", int (*)(dd, dd, dd))                                         \
	X(tcreate, "cudnnCreateTensorDescriptor", int (*)(dd *))                                        \
	X(tset, "cudnnSetTensorNdDescriptor", int (*)(dd, int, int, const int *, const int *))          \
	X(tdestroy, "cudnnDestroyTensorDescriptor", int (*)(dd))                                        \
	X(fcreate, "cudnnCreateFilterDescriptor", int (*)(dd *))                                        \
	X(fset, "cudnnSetFilterNdDescriptor", int (*)(dd, int, int, int, const int *))                  \
	X(fdestroy, "cudnnDestroyFilterDescriptor", int (*)(dd))                                        \
	X(ccreate, "cudnnCreateConvolutionDescriptor", int (*)(dd *))                                   \
	X(cset, "cudnnSetConvolutionNdDescriptor",                                                      \
	  int (*)(dd, int, const int *, const int *, const int *, int, int))                            \
	X(cgroups, "cudnnSetConvolutionGroupCount", int (*)(dd, int))                                   \
	X(cmath, "cudnnSetConvolutionMathType", int (*)(dd, int))                                       \
	X(cdestroy, "cudnnDestroyConvolutionDescriptor", int (*)(dd))                                   \
	X(pcreate, "cudnnCreatePoolingDescriptor", int (*)(dd *))                                       \
	X(pset, "cudnnSetPoolingNdDescriptor", int (*)(dd, int, int, int, const int *, const int *, const int *)) \
	X(pdestroy, "cudnnDestroyPoolingDescriptor", int (*)(dd))                                       \
	X(acreate, "cudnnCreateActivationDescriptor", int (*)(dd *))                                    \
	X(aset, "cudnnSetActivationDescriptor", int (*)(dd, int, int, double))                          \
	X(adestroy, "cudnnDestroyActivationDescriptor", int (*)(dd))                                    \
	X(conv_fwd, "cudnnConvolutionForward",                                                          \
	  int (*)(dd, cp, dd, cp, dd, cp, dd, int, void *, size_t, cp, dd, void *))                     \
	X(conv_bwd_data, "cudnnConvolutionBackwardData",                                                \
	  int (*)(dd, cp, dd, cp, dd, cp, dd, int, void *, size_t, cp, dd, void *))                     \
	X(conv_bwd_filter, "cudnnConvolutionBackwardFilter",                                            \
	  int (*)(dd, cp, dd, cp, dd, cp, dd, int, void *, size_t, cp, dd, void *))                     \
	X(fwd_algos, "cudnnGetConvolutionForwardAlgorithm_v7", int (*)(dd, dd, dd, dd, dd, int, int *, struct perf *)) \
	X(bwd_data_algos, "cudnnGetConvolutionBackwardDataAlgorithm_v7",                                \
	  int (*)(dd, dd, dd, dd, dd, int, int *, struct perf *))                                       \
	X(bwd_filter_algos, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",                            \
	  int (*)(dd, dd, dd, dd, dd, int, int *, struct perf *))                                       \
	X(fwd_ws, "cudnnGetConvolutionForwardWorkspaceSize", int (*)(dd, dd, dd, dd, dd, int, size_t *)) \
	X(bwd_data_ws, "cudnnGetConvolutionBackwardDataWorkspaceSize", int (*)(dd, dd, dd, dd, dd, int, size_t *)) \
	X(bwd_filter_ws, "cudnnGetConvolutionBackwardFilterWorkspaceSize", int (*)(dd, dd, dd, dd, dd, int, size_t *)) \
	X(pool_fwd, "cudnnPoolingForward", int (*)(dd, dd, cp, dd, cp, cp, dd, void *))                 \
	X(dropout_size, "cudnnDropoutGetStatesSize", int (*)(dd, size_t *))                             \
	X(bn_infer, "cudnnBatchNormalizationForwardInference",                                          \
	  int (*)(dd, int, cp, cp, dd, cp, dd, void *, dd, cp, cp, cp, cp, double))                     \
	X(bn_train_ws, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",                      \
	  int (*)(dd, int, int, dd, dd, dd, dd, dd, size_t *))                                          \
	X(bn_reserve, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", int (*)(dd, int, int, dd, dd, size_t *)) \
	X(bn_train, "cudnnBatchNormalizationForwardTrainingEx",                                         \
	  int (*)(dd, int, int, cp, cp, dd, cp, dd, cp, dd, void *, dd, cp, cp, double, void *, void *, double, \
	          void *, void *, dd, void *, size_t, void *, size_t))                                  \
	X(bn_bwd_ws, "cudnnGetBatchNormalizationBackwardExWorkspaceSize",                               \
	  int (*)(dd, int, int, dd, dd, dd, dd, dd, dd, dd, size_t *))                                  \
	X(bn_bwd, "cudnnBatchNormalizationBackwardEx",                                                  \
	  int (*)(dd, int, int, cp, cp, cp, cp, dd, cp, dd, cp, dd, cp, dd, void *, dd, void *, dd, cp, cp, \
	          void *, void *, double, cp, cp, dd, void *, size_t, void *, size_t))

static struct {
	DNN_SYMBOLS(GC_DL_DECLARE)
} dn;

int gc_dnn_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	if (dlsym(h, "gpucloud_cudnn_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libcudnn, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
	__typeof__(dn) t;
	memset(&t, 0, sizeof t);
	DNN_SYMBOLS(GC_DL_RESOLVE)
	dn = t;
	return 0;
}

#define BOUND(ctx, call)                                                                           \
	do {                                                                                           \
		if (gc_bind(ctx) != 0) return CUDNN_STATUS_INTERNAL_ERROR;                                 \
		return call;                                                                               \
	} while (0)

int gc_dnn_create(CUcontext ctx, cudnnHandle_t *h) { BOUND(ctx, dn.create(h)); }
int gc_dnn_destroy(CUcontext ctx, cudnnHandle_t h) { BOUND(ctx, dn.destroy(h)); }
int gc_dnn_set_stream(CUcontext ctx, cudnnHandle_t h, CUstream s) { BOUND(ctx, dn.set_stream(h, s)); }
int gc_dnn_desc_create(CUcontext ctx, int type, cudnnBackendDescriptor_t *d) { BOUND(ctx, dn.bcreate(type, d)); }
int gc_dnn_desc_destroy(CUcontext ctx, cudnnBackendDescriptor_t d) { BOUND(ctx, dn.bdestroy(d)); }
int gc_dnn_set_attr(CUcontext ctx, cudnnBackendDescriptor_t d, int name, int type, int64_t count, const void *elems) {
	BOUND(ctx, dn.bset(d, name, type, count, elems));
}
int gc_dnn_get_attr(CUcontext ctx, cudnnBackendDescriptor_t d, int name, int type, int64_t requested, int64_t *count,
                    void *elems) {
	BOUND(ctx, dn.bget(d, name, type, requested, count, elems));
}
int gc_dnn_finalize(CUcontext ctx, cudnnBackendDescriptor_t d) { BOUND(ctx, dn.bfinalize(d)); }
int gc_dnn_execute(CUcontext ctx, cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
	BOUND(ctx, dn.bexecute(h, plan, pack));
}

/* ---- the legacy API: NVIDIA's descriptors made from the guest's words for one call ---- */

enum { K_TENSOR = 1, K_FILTER = 2, K_CONV = 3, K_POOL = 4, K_ACT = 5 };

// make builds the real descriptor of words w into *out; an absent one (a tensor of no
// dimensions) is NULL.
static int make(const int32_t *w, dd *out) {
	*out = NULL;
	int st;
	switch (w[0]) {
	case K_TENSOR:
		if (w[2] == 0) return 0;
		if (w[2] < 1 || w[2] > 8) return CUDNN_STATUS_BAD_PARAM;
		if ((st = dn.tcreate(out)) != 0) return st;
		return dn.tset(*out, w[1], w[2], &w[3], &w[11]);
	case K_FILTER:
		if (w[3] < 1 || w[3] > 8) return CUDNN_STATUS_BAD_PARAM;
		if ((st = dn.fcreate(out)) != 0) return st;
		return dn.fset(*out, w[1], w[2], w[3], &w[4]);
	case K_CONV:
		if (w[1] < 1 || w[1] > 6) return CUDNN_STATUS_BAD_PARAM;
		if ((st = dn.ccreate(out)) != 0) return st;
		if ((st = dn.cset(*out, w[1], &w[2], &w[8], &w[14], w[20], w[21])) != 0) return st;
		if ((st = dn.cgroups(*out, w[22] > 0 ? w[22] : 1)) != 0) return st;
		return dn.cmath(*out, w[23]);
	case K_POOL:
		if (w[3] < 1 || w[3] > 6) return CUDNN_STATUS_BAD_PARAM;
		if ((st = dn.pcreate(out)) != 0) return st;
		return dn.pset(*out, w[1], w[2], w[3], &w[4], &w[10], &w[16]);
	case K_ACT: {
		if ((st = dn.acreate(out)) != 0) return st;
		double coef;
		memcpy(&coef, &w[3], 8);
		return dn.aset(*out, w[1], w[2], coef);
	}
	}
	return CUDNN_STATUS_BAD_PARAM;
}

static void unmake(const int32_t *w, dd d) {
	if (!d) return;
	switch (w[0]) {
	case K_TENSOR: dn.tdestroy(d); break;
	case K_FILTER: dn.fdestroy(d); break;
	case K_CONV: dn.cdestroy(d); break;
	case K_POOL: dn.pdestroy(d); break;
	case K_ACT: dn.adestroy(d); break;
	}
}

// A host scaling factor: float for all data but double (cuDNN's rule).
union scalar {
	float f;
	double d;
};
static union scalar scalar(uint64_t bits, int32_t dtype) {
	double v;
	memcpy(&v, &bits, 8);
	union scalar s;
	if (dtype == 1) s.d = v; // CUDNN_DATA_DOUBLE
	else s.f = (float)v;
	return s;
}
static double f64(uint64_t bits) {
	double v;
	memcpy(&v, &bits, 8);
	return v;
}
#define P(i) ((void *)(uintptr_t)a[i])

// Each op's descriptor and argument counts (backend/dnn.go).
static const struct {
	int ndesc, nargs;
} shape[] = {
    [1] = {4, 8},  [2] = {4, 8},  [3] = {4, 8}, [4] = {4, 1}, [5] = {4, 1},  [6] = {4, 1},  [7] = {4, 1},   [8] = {4, 1},
    [9] = {4, 1},  [10] = {3, 4}, [11] = {0, 0}, [12] = {3, 10}, [13] = {5, 2}, [14] = {2, 2}, [15] = {5, 19}, [16] = {7, 2},
    [17] = {7, 22},
};

static int legacy(cudnnHandle_t h, int op, dd *d, const int32_t *w, const uint64_t *a, uint64_t *value, uint64_t *data) {
	int32_t dt = w[1]; // the first descriptor's data type (a tensor or filter)
	struct perf pf[8];
	int n = 0, st;
	size_t size = 0;
	switch (op) {
	case 1: case 2: case 3: {
		union scalar al = scalar(a[6], dt), be = scalar(a[7], dt);
		__typeof__(dn.conv_fwd) f = op == 1 ? dn.conv_fwd : op == 2 ? dn.conv_bwd_data : dn.conv_bwd_filter;
		return f(h, &al, d[0], P(1), d[1], P(2), d[2], (int)a[0], P(3), (size_t)a[4], &be, d[3], P(5));
	}
	case 4: case 5: case 6: {
		int req = a[0] > 8 ? 8 : (int)a[0];
		__typeof__(dn.fwd_algos) f = op == 4 ? dn.fwd_algos : op == 5 ? dn.bwd_data_algos : dn.bwd_filter_algos;
		if ((st = f(h, d[0], d[1], d[2], d[3], req, &n, pf)) != 0) return st;
		for (int i = 0; i < n && i < 8; i++) {
			uint32_t tb;
			memcpy(&tb, &pf[i].time, 4);
			data[2 * i] = (uint64_t)(pf[i].algo & 0xff) | (uint64_t)(pf[i].status != 0) << 8 |
			              (uint64_t)(pf[i].determinism & 0xff) << 16 | (uint64_t)(pf[i].math_type & 0xff) << 24 |
			              (uint64_t)tb << 32;
			data[2 * i + 1] = pf[i].memory;
		}
		*value = (uint64_t)n;
		return 0;
	}
	case 7: case 8: case 9: {
		__typeof__(dn.fwd_ws) f = op == 7 ? dn.fwd_ws : op == 8 ? dn.bwd_data_ws : dn.bwd_filter_ws;
		st = f(h, d[0], d[1], d[2], d[3], (int)a[0], &size);
		break;
	}
	case 10: {
		union scalar al = scalar(a[0], w[32 + 1]), be = scalar(a[2], w[32 + 1]);
		return dn.pool_fwd(h, d[0], &al, d[1], P(1), &be, d[2], P(3));
	}
	case 11: st = dn.dropout_size(h, &size); break;
	case 12: {
		union scalar al = scalar(a[1], dt), be = scalar(a[2], dt);
		return dn.bn_infer(h, (int)a[0], &al, &be, d[0], P(3), d[1], P(4), d[2], P(5), P(6), P(7), P(8), f64(a[9]));
	}
	case 13: st = dn.bn_train_ws(h, (int)a[0], (int)a[1], d[0], d[1], d[2], d[3], d[4], &size); break;
	case 14: st = dn.bn_reserve(h, (int)a[0], (int)a[1], d[0], d[1], &size); break;
	case 15: {
		union scalar al = scalar(a[2], dt), be = scalar(a[3], dt);
		return dn.bn_train(h, (int)a[0], (int)a[1], &al, &be, d[0], P(4), d[1], P(5), d[2], P(6), d[3], P(7), P(8), f64(a[9]),
		                   P(10), P(11), f64(a[12]), P(13), P(14), d[4], P(15), (size_t)a[16], P(17), (size_t)a[18]);
	}
	case 16: st = dn.bn_bwd_ws(h, (int)a[0], (int)a[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6], &size); break;
	case 17: {
		union scalar ad = scalar(a[2], dt), bd = scalar(a[3], dt), ap = scalar(a[4], dt), bp = scalar(a[5], dt);
		return dn.bn_bwd(h, (int)a[0], (int)a[1], &ad, &bd, &ap, &bp, d[0], P(6), d[1], P(7), d[2], P(8), d[3], P(9), d[4], P(10),
		                 d[5], P(11), P(12), P(13), P(14), f64(a[15]), P(16), P(17), d[6], P(18), (size_t)a[19], P(20),
		                 (size_t)a[21]);
	}
	default: return CUDNN_STATUS_NOT_SUPPORTED;
	}
	if (st == 0) *value = size;
	return st;
}

int gc_dnn_legacy(CUcontext ctx, cudnnHandle_t h, int op, const int32_t *descs, int ndesc, const uint64_t *args, int nargs,
                  uint64_t *value, uint64_t *data) {
	if (op < 1 || op > 17) return CUDNN_STATUS_NOT_SUPPORTED;
	if (ndesc != shape[op].ndesc || nargs != shape[op].nargs || ndesc > 8) return CUDNN_STATUS_BAD_PARAM;
	if (gc_bind(ctx) != 0) return CUDNN_STATUS_INTERNAL_ERROR;
	dd d[8] = {0};
	int st = 0;
	for (int i = 0; i < ndesc && st == 0; i++) st = make(descs + 32 * i, &d[i]);
	if (st == 0) st = legacy(h, op, d, descs, args, value, data);
	for (int i = 0; i < ndesc; i++) unmake(descs + 32 * i, d[i]);
	return st;
}

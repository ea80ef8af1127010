// Run-time binding to NVIDIA's cuSPARSE, cuFFT, cuRAND, cuSOLVER and nvJPEG (see libcall.h).
#include "libcall.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>

enum { NLIBS = 6, LIB_NPP = 5 };
static void *libs[NLIBS];

static const char *const npp_names[] = {"libnppc.so.13", "libnppial.so.13", "libnppicc.so.13", "libnppidei.so.13",
                                        "libnppif.so.13", "libnppig.so.13", "libnppim.so.13", "libnppist.so.13",
                                        "libnppisu.so.13", "libnppitc.so.13", "libnpps.so.13"};
enum { NNPP = sizeof npp_names / sizeof npp_names[0] };
static void *npp_libs[NNPP];

// gc_lib_open_one opens libname, refusing gpucloud's guest library (it exports marker).
static void *gc_lib_open_one(const char *libname, const char *marker, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return NULL;
	if (dlsym(h, marker) != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest library, not NVIDIA's", libname);
		dlclose(h);
		return NULL;
	}
	return h;
}

int gc_lib_open(int lib, const char *libname, const char *marker, char *err, size_t errlen) {
	void *h = gc_lib_open_one(libname, marker, err, errlen);
	if (h == NULL) return -1;
	libs[lib] = h;
	return 0;
}

void *gc_lib_sym(int lib, const char *name) {
	if (lib == LIB_NPP) {
		for (int i = 0; i < NNPP; i++) {
			void *f = npp_libs[i] ? dlsym(npp_libs[i], name) : NULL;
			if (f) return f;
		}
		return NULL;
	}
	if (lib < 0 || lib >= NLIBS || libs[lib] == NULL) return NULL;
	return dlsym(libs[lib], name);
}

int gc_npp_open(const char *dir, const char *marker, char *err, size_t errlen) {
	for (int i = 0; i < NNPP; i++) {
		char path[4096];
		if (dir)
			snprintf(path, sizeof path, "%s/%s", dir, npp_names[i]);
		else
			snprintf(path, sizeof path, "%s", npp_names[i]);
		void *h = gc_lib_open_one(path, marker, err, errlen);
		if (h == NULL) {
			for (int j = 0; j < i; j++) {
				dlclose(npp_libs[j]);
				npp_libs[j] = NULL;
			}
			return -1;
		}
		npp_libs[i] = h;
	}
	return 0;
}

int gc_npp_call(CUcontext ctx, int sig, void *f, const uint64_t *a, void *const *p, uint64_t *o) {
	if (gc_bind(ctx) != 0) return GC_LIB_UNBOUND;
	return gc_npp_dispatch(sig, f, a, p, o);
}

int gc_lib_call(CUcontext ctx, int lib, int fn, void *handle, int mode, const uint64_t *a, void *const *p, uint64_t *o) {
	if (gc_bind(ctx) != 0) return GC_LIB_UNBOUND;
	if (mode >= 0) {
		static int (*set_mode)(void *, int);
		if (!set_mode && !(set_mode = (int (*)(void *, int))gc_lib_sym(0, "cusparseSetPointerMode"))) return GC_LIB_MISSING;
		int st = set_mode(handle, mode);
		if (st != 0) return st;
	}
	return gc_lib_dispatch(lib, fn, a, p, o);
}

int gc_rand_table(unsigned table, const void **out) {
    const char *name = table == 101 || table == 102   ? "curandGetDirectionVectors32"
                       : table == 103 || table == 104 ? "curandGetDirectionVectors64"
                       : table == 1                   ? "curandGetScrambleConstants32"
                       : table == 2                   ? "curandGetScrambleConstants64"
                                                      : NULL;
    if (!name) return 104; /* CURAND_STATUS_OUT_OF_RANGE */
    void *f = gc_lib_sym(2, name);
    if (!f) return GC_LIB_MISSING;
    void *p = NULL;
    int st = table > 2 ? ((int (*)(void **, int))f)(&p, (int)table) : ((int (*)(void **))f)(&p);
    if (st == 0 && !p) return 999; /* CURAND_STATUS_INTERNAL_ERROR: no table */
    if (st == 0) *out = p;
    return st;
}

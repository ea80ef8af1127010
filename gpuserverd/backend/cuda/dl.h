// Loading a vendor library's entry points into a table of function pointers (NVIDIA's driver in
// driver.c, cuBLAS in blas.c), each table listed once as an X-macro of (field, symbol, type).
#ifndef GPUCLOUD_CUDA_DL_H
#define GPUCLOUD_CUDA_DL_H

#include <dlfcn.h>
#include <stdio.h>

// gc_dl_open dlopens libname, or writes why not into err and returns NULL.
static inline void *gc_dl_open(const char *libname, char *err, size_t errlen) {
	void *h = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
	}
	return h;
}

// GC_DL_DECLARE declares a table's field.
#define GC_DL_DECLARE(field, sym, type) __typeof__(type) field;

// GC_DL_RESOLVE fills field of table t from handle h; a missing symbol is named in err, h closed,
// and the calling function returns -1. It uses the caller's h, t, libname, err and errlen.
#define GC_DL_RESOLVE(field, sym, type)                                                            \
	t.field = (__typeof__(type))dlsym(h, sym);                                                     \
	if (t.field == NULL) {                                                                         \
		snprintf(err, errlen, "%s: missing symbol %s", libname, sym);                              \
		dlclose(h);                                                                                \
		return -1;                                                                                 \
	}

#endif

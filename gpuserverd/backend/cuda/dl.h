// Loading a vendor library's entry points into a table of function pointers (NVIDIA's driver in
// driver.c, cuBLAS in blas.c), each table listed once as an X-macro of (field, symbol, type).
#ifndef GPUCLOUD_CUDA_DL_H
#define GPUCLOUD_CUDA_DL_H

#include <dlfcn.h>
#include <pthread.h>
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

// GC_DL_OPTIONAL_TABLE(t, SYMBOLS) defines table t of the driver's optional entry points, resolved
// once, on first use, each symbol on its own (a driver lacking one still offers the others); the
// file supplies gc_driver_lib and gc_bind. GC_DL_BIND(t, ctx, fn) resolves t, then makes ctx
// current, or has the caller return why not: NOT_SUPPORTED (the caller's) without fn, or the
// bind's error.
#define GC_DL_OPTIONAL_FIELD(field, sym, type) gc_dl_t_->field = (__typeof__(type))dlsym(h, sym);
#define GC_DL_OPTIONAL_TABLE(t, SYMBOLS)                                                           \
	static struct {                                                                                \
		SYMBOLS(GC_DL_DECLARE)                                                                     \
	} t;                                                                                           \
	static pthread_once_t t##_once = PTHREAD_ONCE_INIT;                                            \
	static void t##_resolve(void) {                                                                \
		__typeof__(t) *gc_dl_t_ = &t;                                                              \
		void *h = gc_driver_lib();                                                                 \
		if (h == NULL) return;                                                                     \
		SYMBOLS(GC_DL_OPTIONAL_FIELD)                                                              \
	}
#define GC_DL_BIND(t, ctx, fn)                                                                     \
	do {                                                                                           \
		pthread_once(&t##_once, t##_resolve);                                                      \
		if (t.fn == NULL) return NOT_SUPPORTED;                                                    \
		CUresult r_ = gc_bind(ctx);                                                                \
		if (r_ != 0) return r_;                                                                    \
	} while (0)

#endif

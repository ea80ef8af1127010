// Run-time binding to NVIDIA's cuSOLVER (see solver.h).
#include "solver.h"

#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>

static void *lib;

// The entry points resolved so far, by wire id (solverFirstFn 11100 .. solverLastFn 11999).
enum { FIRST = 11100, COUNT = 900 };
static void *syms[COUNT];

int gc_solver_open(const char *libname, char *err, size_t errlen) {
	void *h = gc_dl_open(libname, err, errlen);
	if (h == NULL) return -1;
	if (dlsym(h, "gpucloud_cusolver_guest") != NULL) {
		snprintf(err, errlen, "%s is gpucloud's guest libcusolver, not NVIDIA's", libname);
		dlclose(h);
		return -1;
	}
	if (dlsym(h, "cusolverDnCreate") == NULL) {
		snprintf(err, errlen, "%s: missing symbol cusolverDnCreate", libname);
		dlclose(h);
		return -1;
	}
	lib = h;
	return 0;
}

int gc_solver_call(CUcontext ctx, uint32_t fn, const uint64_t *a) {
	const char *name = gc_solver_name(fn);
	if (lib == NULL || name == NULL || fn < FIRST || fn >= FIRST + COUNT) return CUSOLVER_STATUS_NOT_SUPPORTED;
	void *f = syms[fn - FIRST];
	if (f == NULL) {
		// A worker serves one session from one goroutine at a time: no lock needed.
		if ((f = dlsym(lib, name)) == NULL) return CUSOLVER_STATUS_NOT_SUPPORTED;
		syms[fn - FIRST] = f;
	}
	if (gc_bind(ctx) != 0) return CUSOLVER_STATUS_INTERNAL_ERROR;
	return gc_solver_invoke(fn, f, a);
}

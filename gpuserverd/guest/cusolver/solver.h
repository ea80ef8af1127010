/* gpucloud's libcusolver.so.12: cuSOLVER's dense API remoted to gpuserverd. api_gen.c (from
 * apigen: every cusolverDn.h function) packs each call's parameters into words and calls
 * gc_solver_call (solver.c); the types come from cusolver_gen.h, gpucloud's own declarations
 * (no NVIDIA header in the build). */
#ifndef GPUCLOUD_CUSOLVER_H
#define GPUCLOUD_CUSOLVER_H

#include "cusolver_gen.h"

#include <stdint.h>
#include <string.h>

#define GC_EXPORT __attribute__((visibility("default")))

#define CUSOLVER_STATUS_SUCCESS 0
#define CUSOLVER_STATUS_NOT_INITIALIZED 1
#define CUSOLVER_STATUS_ALLOC_FAILED 2
#define CUSOLVER_STATUS_INVALID_VALUE 3
#define CUSOLVER_STATUS_EXECUTION_FAILED 6
#define CUSOLVER_STATUS_INTERNAL_ERROR 7
#define CUSOLVER_STATUS_NOT_SUPPORTED 9

/* How a parameter travels (backend.SolverArgKind, in the same order). */
enum { GC_VALUE, GC_FLOAT, GC_DOUBLE, GC_DEVICE, GC_OBJECT, GC_NEW, GC_STREAM, GC_OUT, GC_OUTARRAY, GC_HOSTWORK };

struct gc_solver_arg {
    uint8_t kind, size; /* size: a GC_OUT's bytes, a GC_OUTARRAY element's */
    int8_t ref;         /* the parameter holding a GC_OUTARRAY's count or a GC_HOSTWORK's size */
    uint8_t nullable;   /* a GC_OBJECT that may be NULL (a computation's params: NVIDIA's defaults) */
};

struct gc_solver_fn {
    uint32_t id;
    const char *name;
    int nargs, async, destroy;
    const struct gc_solver_arg *args;
};

/* gc_solver_call sends f's words w (o: each output parameter's host pointer, else NULL) and
 * writes the outputs the reply carries. */
cusolverStatus_t gc_solver_call(const struct gc_solver_fn *f, uint64_t *w, void *const *o);
/* gc_solver_refuse answers a function gpucloud does not remote, naming it on stderr once. */
cusolverStatus_t gc_solver_refuse(int *said, const char *name, const char *why);
/* The server's handle of a stream. */
uint64_t gc_solver_stream(cudaStream_t s);

static inline uint64_t gc_solver_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline uint64_t gc_solver_f64(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

#endif

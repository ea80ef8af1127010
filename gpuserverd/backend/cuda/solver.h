// NVIDIA's cuSOLVER (dense API), loaded at run time (dlopen of libcusolver.so.12) on a session's
// first cuSOLVER call, so gpuserverd builds and starts without it. Each remoted function is called
// through solvercalls_gen.c's typed call of its wire id; cusolverStatus_t is an int.
#ifndef GPUCLOUD_CUDA_SOLVER_H
#define GPUCLOUD_CUDA_SOLVER_H

#include "driver.h"

#include <stdint.h>

#define CUSOLVER_STATUS_NOT_INITIALIZED 1
#define CUSOLVER_STATUS_INTERNAL_ERROR 7
#define CUSOLVER_STATUS_NOT_SUPPORTED 9

// gc_solver_open loads libname: 0, or -1 with err filled. A library that exports
// gpucloud_cusolver_guest is gpucloud's own guest library and is refused.
int gc_solver_open(const char *libname, char *err, size_t errlen);

// gc_solver_call makes ctx current and calls function fn (a wire id) with the words a, each
// already what the parameter's C type takes (NVIDIA's pointers for objects, streams and outputs).
// A function the loaded library lacks is CUSOLVER_STATUS_NOT_SUPPORTED.
int gc_solver_call(CUcontext ctx, uint32_t fn, const uint64_t *a);

// Generated (solvercalls_gen.c): fn's name, or NULL for an id that is not remoted; the typed call.
const char *gc_solver_name(uint32_t fn);
int gc_solver_invoke(uint32_t fn, void *f, const uint64_t *a);

#endif

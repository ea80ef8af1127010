// Run-time binding to NVIDIA's cuSPARSE, cuFFT, cuRAND, cuSOLVER and nvJPEG (libcall.go): each library is opened on
// a session's first call of it, and each function found by name on its first use.
#ifndef GPUCLOUD_CUDA_LIBCALL_H
#define GPUCLOUD_CUDA_LIBCALL_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

// GC_LIB_MISSING: the library has no such function (gc_lib_call answers the library's
// not-supported status for it); GC_LIB_UNBOUND: the context could not be made current.
#define GC_LIB_MISSING (-1000)
#define GC_LIB_UNBOUND (-1001)

// gc_lib_open opens NVIDIA's library lib (0 cuSPARSE, 1 cuFFT, 2 cuRAND, 3 cuSOLVER, 4 nvJPEG; NPP: gc_npp_open) from libname, refusing
// gpucloud's own guest library (marker: gpucloud_<name>_guest); 0 or -1 with err said.
int gc_lib_open(int lib, const char *libname, const char *marker, char *err, size_t errlen);
void *gc_lib_sym(int lib, const char *name);
// gc_lib_call binds ctx, sets a cuSPARSE handle's pointer mode (mode >= 0) and runs function fn.
int gc_lib_call(CUcontext ctx, int lib, int fn, void *handle, int mode, const uint64_t *a, void *const *p, uint64_t *o);
// gc_addr is a device address or NVIDIA's handle as the pointer NVIDIA's functions take.
static inline void *gc_addr(uint64_t a) { return (void *)(uintptr_t)a; }
// gc_rand_table points *out at NVIDIA's cuRAND host table (backend.RandTable*: a direction-vector set
// 101-104, or scramble constants 1 and 2); cuRAND's status, or GC_LIB_MISSING.
int gc_rand_table(unsigned table, const void **out);
int gc_lib_dispatch(int lib, int fn, const uint64_t *a, void *const *p, uint64_t *o); // libcalls_gen.c

// NPP (lib 5) is NVIDIA's eleven libraries: gc_npp_open opens them all (from dir when not NULL),
// libnppc first (the others need it), refusing gpucloud's (marker); gc_lib_sym(5, name) searches
// them. gc_npp_call binds ctx and calls NVIDIA's function f by its signature (nppcalls_gen.c).
int gc_npp_open(const char *dir, const char *marker, char *err, size_t errlen);
int gc_npp_call(CUcontext ctx, int sig, void *f, const uint64_t *a, void *const *p, uint64_t *o);
int gc_npp_dispatch(int sig, void *f, const uint64_t *a, void *const *p, uint64_t *o); // nppcalls_gen.c

#endif

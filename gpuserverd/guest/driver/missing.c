/* Stand-ins for driver functions this library does not implement. With GPUCLOUD_STUB_MISSING=1,
 * cuGetProcAddress hands one out for a name it lacks instead of failing the lookup, so a program
 * (or NVIDIA's runtime, which looks up every driver function it might use at start-up) gets
 * going and any call it actually makes fails with CUDA_ERROR_NOT_SUPPORTED, naming the function. */
#include "guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSTUBS 1024
static const char *names[NSTUBS];
static int used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult missing(int i) {
    fprintf(stderr, "gpucloud: %s is not implemented (CUDA_ERROR_NOT_SUPPORTED)\n", names[i]);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Stubs ignore their arguments: under the System V ABI the caller owns them. */
#define S(i) static CUresult stub_##i(void) { return missing(i); }
#define S16(h) S(h##0) S(h##1) S(h##2) S(h##3) S(h##4) S(h##5) S(h##6) S(h##7) \
    S(h##8) S(h##9) S(h##a) S(h##b) S(h##c) S(h##d) S(h##e) S(h##f)
#define S256(h) S16(h##0) S16(h##1) S16(h##2) S16(h##3) S16(h##4) S16(h##5) S16(h##6) S16(h##7) \
    S16(h##8) S16(h##9) S16(h##a) S16(h##b) S16(h##c) S16(h##d) S16(h##e) S16(h##f)
S256(0x0) S256(0x1) S256(0x2) S256(0x3)
#undef S
#define S(i) (void *)stub_##i,
static void *const stubs[NSTUBS] = {S256(0x0) S256(0x1) S256(0x2) S256(0x3)};

void *gc_missing_stub(const char *name) {
    void *fn = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < used; i++) /* one stub per name */
        if (strcmp(names[i], name) == 0) fn = stubs[i];
    if (!fn && used < NSTUBS) {
        char *copy = strdup(name);
        if (copy) {
            names[used] = copy;
            fn = stubs[used++];
        }
    }
    pthread_mutex_unlock(&mu);
    return fn;
}

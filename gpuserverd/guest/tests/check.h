/* Tiny assertion helpers for the guest library's C test programs. */
#ifndef CHECK_H
#define CHECK_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static const char *errname(CUresult r) {
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

#define CHECK(call)                                                                           \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                             \
            fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call, r_, errname(r_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define EXPECT_RC(call, want)                                                                 \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != (want)) {                                                                   \
            fprintf(stderr, "%s:%d: %s = %d (%s), want %s\n", __FILE__, __LINE__, #call, r_,  \
                    errname(r_), #want);                                                      \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define EXPECT(cond)                                                                          \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* The simulated backend's module image naming its built-in kernels (see backend/sim/module.go). */
static const char sim_image[] = "GPUSIM-MODULE 1\n"
                                "kernel vector_add_f32\nkernel saxpy_f32\nkernel fill_u32\n"
                                "kernel matmul_f32\nkernel spin\nglobal counter 16\n";
#endif

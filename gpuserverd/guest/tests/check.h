/* Tiny assertion helpers for the guest library's C test programs. */
#ifndef CHECK_H
#define CHECK_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/* sim_fatbin writes a fat binary (16-byte header, then sim_image as its one entry) into out, as
 * nvcc's fat binaries wrap their images, and returns its size. */
#define SIM_FATBIN_SIZE (16 + sizeof sim_image)
static inline size_t sim_fatbin(unsigned char out[SIM_FATBIN_SIZE]) {
    unsigned magic = 0xBA55ED50u;
    unsigned short ver = 1, hsize = 16;
    unsigned long long body = sizeof sim_image;
    memcpy(out, &magic, 4);
    memcpy(out + 4, &ver, 2);
    memcpy(out + 6, &hsize, 2);
    memcpy(out + 8, &body, 8);
    memcpy(out + 16, sim_image, sizeof sim_image);
    return SIM_FATBIN_SIZE;
}
/* sim_kernel makes device 0's primary context current, loads sim_image and returns its kernel
 * name (the module stays loaded; *mod, when asked, for the caller to unload). */
static inline CUfunction sim_kernel(const char *name, CUmodule *mod) {
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&m, sim_image));
    CHECK(cuModuleGetFunction(&f, m, name));
    if (mod) *mod = m;
    return f;
}
#endif

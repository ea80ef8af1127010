/* CHECK for the guest libraries' C test programs: a failed condition names itself and exits 1. */
#ifndef GC_TEST_CHECK_H
#define GC_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond);                      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)
#define OK(call) CHECK((call) == 0)
#define CU(call) CHECK((call) == CUDA_SUCCESS) /* a driver call (include cuda.h first) */

/* gc_test_context makes device 0's primary context current. */
#define GC_TEST_CONTEXT()                                                                           \
    do {                                                                                            \
        CUcontext ctx_;                                                                             \
        CHECK(cuInit(0) == CUDA_SUCCESS);                                                           \
        CHECK(cuDevicePrimaryCtxRetain(&ctx_, 0) == CUDA_SUCCESS);                                  \
        CHECK(cuCtxSetCurrent(ctx_) == CUDA_SUCCESS);                                               \
    } while (0)
#endif

// Shared by the runtime-API test programs (rt_*.cu): error checks and exit codes.
// Exit 0: passed; 1: a wrong result; 2: a CUDA error.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,               \
                         cudaGetErrorName(e_), cudaGetErrorString(e_));                           \
            std::exit(2);                                                                         \
        }                                                                                         \
    } while (0)

#define EXPECT(cond, ...)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::fprintf(stderr, "%s:%d: wrong: ", __FILE__, __LINE__);                           \
            std::fprintf(stderr, __VA_ARGS__);                                                    \
            std::fprintf(stderr, "\n");                                                           \
            std::exit(1);                                                                         \
        }                                                                                         \
    } while (0)

/* A test double of the CUDA toolkit's cuda_profiler_api.h (see cuda_runtime_api.h here). */
#ifndef GPUCLOUD_TEST_CUDA_PROFILER_API_H
#define GPUCLOUD_TEST_CUDA_PROFILER_API_H
#include "cuda_runtime_api.h"
cudaError_t cudaProfilerStart(void);
cudaError_t cudaProfilerStop(void);
#endif

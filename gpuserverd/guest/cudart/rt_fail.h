/* For this runtime's files written without the CUDA headers (torch_props.c):
 * rt_fail records a failure code (a cudaError_t's number) as the thread's last error, as every
 * runtime call does, and gives it back. Defined in cudart.c. */
#ifndef GPUCLOUD_CUDART_RT_FAIL_H
#define GPUCLOUD_CUDART_RT_FAIL_H
int rt_fail(int code);
#endif

/* Test double, continued: the runtime's IPC types (cudart/ipc.c), as NVIDIA's driver_types.h
 * names and lays them out. */
#ifndef GPUCLOUD_TEST_CUDA_RUNTIME_IPC_H
#define GPUCLOUD_TEST_CUDA_RUNTIME_IPC_H

#define CUDA_IPC_HANDLE_SIZE 64
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaIpcMemLazyEnablePeerAccess 0x01

typedef struct cudaIpcEventHandle_st { char reserved[CUDA_IPC_HANDLE_SIZE]; } cudaIpcEventHandle_t;
typedef struct cudaIpcMemHandle_st { char reserved[CUDA_IPC_HANDLE_SIZE]; } cudaIpcMemHandle_t;
struct cudaMemPoolPtrExportData { unsigned char reserved[64]; };
/* cudaMemAccessFlags and cudaMemAccessDesc: cuda_runtime_families.h. */

#endif

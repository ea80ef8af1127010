/* The runtime calls PyTorch imports (../shared/cuda-surface/torch-2.11-needs-libcudart.txt,
 * kept in torch-needs.txt) that this runtime does not remote yet: each answers
 * cudaErrorNotSupported, sets the thread's last error, and says so once on stderr, naming the
 * call, so torch loads and reports a clean error where it uses one (never a crash, never silence).
 *
 * WEAK definitions: the hand-written families (graphs and capture, memory pools, launchEx and
 * cooperative launches) define these strongly and win at link time without a conflict, and so
 * does a generated stand-in of the same weak kind. Defined without a parameter list: a refusal
 * reads none of its arguments, so it needs no declaration of their types. */
#include <stdio.h>
#include <string.h>

#include "rt_fail.h"

#define EXPORT __attribute__((visibility("default")))
#define NOT_SUPPORTED 801 /* cudaErrorNotSupported */


static int refuse(const char *name, int *told) {
    if (!__atomic_exchange_n(told, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "gpucloud: %s is not supported by gpucloud's CUDA runtime yet (cudaErrorNotSupported)\n", name);
    return rt_fail(NOT_SUPPORTED);
}

#define REFUSE(name)                                                            \
    EXPORT __attribute__((weak)) int name() {                                   \
        static int told;                                                        \
        return refuse(#name, &told);                                            \
    }

/* CUDA graphs and stream capture (torch.cuda.graphs, torch.compile's cudagraph trees). */
REFUSE(cudaStreamBeginCapture)
REFUSE(cudaStreamEndCapture)
REFUSE(cudaGraphInstantiateWithFlags)
REFUSE(cudaGraphLaunch)
REFUSE(cudaGraphDestroy)
REFUSE(cudaGraphExecDestroy)
REFUSE(cudaGraphGetNodes)
REFUSE(cudaGraphNodeGetDependencies)
REFUSE(cudaGraphDebugDotPrint)
/* Stream-ordered memory pools (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync only). */
REFUSE(cudaDeviceGetDefaultMemPool)
REFUSE(cudaMemPoolGetAttribute)
REFUSE(cudaMemPoolSetAttribute)
REFUSE(cudaMemPoolSetAccess)
REFUSE(cudaMemPoolTrimTo)
/* Launches with attributes (clusters) and cooperative launches. */
REFUSE(cudaLaunchKernelExC)
REFUSE(cudaLaunchCooperativeKernel)
/* IPC between processes (torch.multiprocessing sharing CUDA tensors): the handles would name
 * memory of another process's session; refused until sessions of one instance can share. */
REFUSE(cudaIpcGetMemHandle)
REFUSE(cudaIpcOpenMemHandle)
REFUSE(cudaIpcCloseMemHandle)
REFUSE(cudaIpcGetEventHandle)
REFUSE(cudaIpcOpenEventHandle)

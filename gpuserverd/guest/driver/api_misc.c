/* Error names and strings, and cuGetProcAddress. */
#include "guest.h"
#include "procs.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
    /* The rest of CUDA 13's CUresult codes (by number: include/cuda.h declares the ones this
     * library returns itself), so an error the worker's driver returned has its name and text
     * (PyTorch's messages print cudaGetErrorString; a stream capture's errors are all here). */
    {(CUresult)5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
    {(CUresult)6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized: call cudaProfilerInitialize()"},
    {(CUresult)7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
    {(CUresult)8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
    {(CUresult)34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {(CUresult)36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "API call is not supported in the installed CUDA driver"},
    {(CUresult)102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
    {(CUresult)202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {(CUresult)205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {(CUresult)206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {(CUresult)207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
    {(CUresult)208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {(CUresult)210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {(CUresult)211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {(CUresult)212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
    {(CUresult)213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
    {(CUresult)214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {(CUresult)215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
    {(CUresult)216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
    {(CUresult)217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {(CUresult)219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
    {(CUresult)220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
    {(CUresult)221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {(CUresult)222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {(CUresult)223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
    {(CUresult)224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
    {(CUresult)225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
    {(CUresult)226, "CUDA_ERROR_CONTAINED", "invalid access of peer GPU memory over nvlink or a hardware error"},
    {(CUresult)300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {(CUresult)302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
    {(CUresult)303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {(CUresult)304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {(CUresult)402, "CUDA_ERROR_LOSSY_QUERY", "the requested query would lose precision"},
    {(CUresult)703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
    {(CUresult)704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {(CUresult)705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {(CUresult)708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
    {(CUresult)709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {(CUresult)710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {(CUresult)711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
    {(CUresult)714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
    {(CUresult)715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {(CUresult)716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {(CUresult)717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
    {(CUresult)718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
    {(CUresult)720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {(CUresult)721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory not completely freed"},
    {(CUresult)802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {(CUresult)803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {(CUresult)804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {(CUresult)805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
    {(CUresult)806, "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
    {(CUresult)807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
    {(CUresult)808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
    {(CUresult)809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"},
    {(CUresult)810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
    {(CUresult)811, "CUDA_ERROR_CDP_NOT_SUPPORTED", "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"},
    {(CUresult)812, "CUDA_ERROR_CDP_VERSION_MISMATCH", "Interaction between CUDA Dynamic Parallelism of old and new versions is not supported"},
    {(CUresult)900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {(CUresult)901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {(CUresult)902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
    {(CUresult)903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
    {(CUresult)904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
    {(CUresult)905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
    {(CUresult)906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
    {(CUresult)907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
    {(CUresult)908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
    {(CUresult)909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {(CUresult)910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {(CUresult)911, "CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occured in external entity outside of CUDA"},
    {(CUresult)912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration"},
    {(CUresult)913, "CUDA_ERROR_FUNCTION_NOT_LOADED", "the function handle is not loaded when calling an API that requires a loaded function"},
    {(CUresult)914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "one or more resources passed in are not valid resource types for the operation"},
    {(CUresult)915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "one or more resources are insufficient or non-applicable for the operation"},
    {(CUresult)916, "CUDA_ERROR_KEY_ROTATION", "an error happened during the key rotation sequence"},
};

/* describe sets *s to the code's name or text; unknown codes get NULL and an error, as in CUDA. */
static CUresult describe(CUresult code, const char **s, int text) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = NULL;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == code) {
            *s = text ? errors[i].text : errors[i].name;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult code, const char **s) { return describe(code, s, 0); }
EXPORT CUresult cuGetErrorString(CUresult code, const char **s) { return describe(code, s, 1); }

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

static void *lookup(const char *symbol, int version, int *too_new) {
    const struct gc_proc *best = NULL, *exact = NULL;
    for (unsigned i = 0; i < gc_nprocs; i++) {
        const struct gc_proc *p = &gc_procs[i];
        if (strcmp(p->name, symbol) != 0) continue;
        if (p->version == 0) exact = p;
        else if (p->version <= version && (!best || p->version > best->version)) best = p;
        else if (p->version > version) *too_new = 1;
    }
    if (best) return best->fn;
    return exact ? exact->fn : NULL;
}

/* The exported _ptsz or _ptds form of fn, under any of the names fn is exported as (a legacy
 * name may alias its versioned one), or fn itself when it has none. */
static void *per_thread_form(void *fn) {
    for (unsigned i = 0; i < gc_nprocs; i++) {
        const struct gc_proc *p = &gc_procs[i];
        size_t n = strlen(p->name);
        if (p->version != 0 || p->fn != fn || n + 6 > 128) continue;
        char name[128];
        memcpy(name, p->name, n);
        static const char *const forms[] = {"_ptsz", "_ptds"};
        for (unsigned f = 0; f < 2; f++) {
            memcpy(name + n, forms[f], 6);
            int unused = 0;
            void *pt = lookup(name, 0, &unused);
            if (pt) return pt;
        }
    }
    return fn;
}

/* Lookup flags: CU_GET_PROC_ADDRESS_DEFAULT (0) gives the build's default-stream flavour (legacy
 * here), LEGACY_STREAM (1) the legacy functions, PER_THREAD_DEFAULT_STREAM (2) the _ptsz/_ptds
 * forms where a name has them (whose NULL stream is the thread's per-thread default stream,
 * ptsz_gen.c), else the legacy function. */
#define PROC_FLAGS_KNOWN (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)PROC_FLAGS_KNOWN) return CUDA_ERROR_INVALID_VALUE;
    char name[128];
    size_t n = strlen(symbol);
    if (n >= sizeof name) {
        *pfn = NULL;
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    memcpy(name, symbol, n + 1);
    int too_new = 0;
    void *fn = lookup(name, cudaVersion, &too_new);
    /* The per-thread form of the version's function: cuMemcpyHtoDAsync from CUDA 3.2 is
     * cuMemcpyHtoDAsync_v2, so cuMemcpyHtoDAsync_v2_ptsz; cuStreamGetCaptureInfo for CUDA 11.3 is
     * cuStreamGetCaptureInfo_v2_ptsz, not the newer _v3's (another ABI). */
    if (fn && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) fn = per_thread_form(fn);
    if (!fn && n > 5 && (!strcmp(name + n - 5, "_ptds") || !strcmp(name + n - 5, "_ptsz"))) {
        name[n - 5] = 0;
        fn = lookup(name, cudaVersion, &too_new);
    }
    if (fn) too_new = 0;
    *pfn = fn;
    CUdriverProcAddressQueryResult st = fn ? CU_GET_PROC_ADDRESS_SUCCESS
                                           : too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                     : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (status) *status = st;
    gc_trace("cuGetProcAddress %s version %d flags %llu -> %s", symbol, cudaVersion, (unsigned long long)flags,
             st == CU_GET_PROC_ADDRESS_SUCCESS ? "found" : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient" : "not found");
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    return proc_address(symbol, pfn, cudaVersion, flags, status);
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return GC_T(cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL));
}

/* Profiler switches start and stop collection by a profiling tool attached to the driver. None
 * attaches to the guest's (tools attach to the driver on the GPU's host), so there is nothing to
 * switch: they succeed, as NVIDIA's do with no tool attached. */
EXPORT CUresult cuProfilerStart(void) { return GC_T(CUDA_SUCCESS); }
EXPORT CUresult cuProfilerStop(void) { return GC_T(CUDA_SUCCESS); }

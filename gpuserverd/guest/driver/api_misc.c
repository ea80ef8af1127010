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

/* Lookup flags: CU_GET_PROC_ADDRESS_DEFAULT (0) gives the build's default-stream flavour (legacy
 * here), LEGACY_STREAM (1) the legacy functions, PER_THREAD_DEFAULT_STREAM (2) the _ptsz/_ptds
 * ones. This library has one default stream per session, which orders work at least as strictly as
 * a per-thread one, so a per-thread lookup and an explicit _ptsz/_ptds name get the legacy function:
 * results are the same, only concurrency between threads' default streams is lost. */
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

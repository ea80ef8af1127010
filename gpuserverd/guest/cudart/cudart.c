/* gpucloud's CUDA runtime (libcudart.so.13): the runtime API on top of the driver API, for
 * programs built with `nvcc -cudart shared`. NVIDIA's own runtime will not start on a driver
 * other than NVIDIA's (it checks the driver through private export tables; see
 * docs/benchmarks/gpu-runtime-compat.md), so a guest image ships this library in its place: the
 * program is unchanged, the loader finds this libcudart.so.13 first, and every call goes to the
 * guest libcuda.so.1 (or, run natively, to NVIDIA's driver, which is how it is checked).
 *
 * Built on the GPU machine against the toolkit's headers (cuda.h, cuda_runtime_api.h), so every
 * signature here is checked against NVIDIA's declarations. Covers what nvcc's generated code and
 * ordinary programs use: fat-binary and kernel registration, launches, memory, copies, memsets,
 * streams, events, devices and their properties, errors. */
#define _GNU_SOURCE
#include "internal.h"
#include "rt_fail.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors: cudaError_t and CUresult share their numbers for everything the driver returns ---- */

static __thread cudaError_t last_error;

cudaError_t ret(CUresult rc) {
    cudaError_t e = (cudaError_t)rc;
    if (e != cudaSuccess && e != cudaErrorNotReady) last_error = e;
    return e;
}

/* rt_fail is ret for the files written without the CUDA headers (torch_*.c, rt_fail.h). */
int rt_fail(int code) { return (int)ret((CUresult)code); }

EXPORT cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

/* The runtime's names differ from the driver's for these codes (or the driver has none). */
static const struct {
    int code;
    const char *name, *text;
} own_errors[] = {
    {2, "cudaErrorMemoryAllocation", NULL},
    {3, "cudaErrorInitializationError", NULL},
    {4, "cudaErrorCudartUnloading", NULL},
    {12, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {13, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"},
    {200, "cudaErrorInvalidKernelImage", NULL},
    {201, "cudaErrorDeviceUninitialized", NULL},
    {205, "cudaErrorMapBufferObjectFailed", NULL},
    {206, "cudaErrorUnmapBufferObjectFailed", NULL},
    {209, "cudaErrorNoKernelImageForDevice", NULL},
    {214, "cudaErrorECCUncorrectable", NULL},
    {216, "cudaErrorDeviceAlreadyInUse", NULL},
    {400, "cudaErrorInvalidResourceHandle", NULL},
    {500, "cudaErrorSymbolNotFound", NULL},
    {708, "cudaErrorSetOnActiveProcess", NULL},
    {719, "cudaErrorLaunchFailure", NULL},
};

static int own_error(cudaError_t e) {
    for (size_t i = 0; i < sizeof own_errors / sizeof own_errors[0]; i++)
        if (own_errors[i].code == (int)e) return (int)i;
    return -1;
}

/* cudaGetErrorName turns the driver's CUDA_ERROR_INVALID_VALUE into cudaErrorInvalidValue: the
 * runtime's name for every code the two share a spelling for. */
EXPORT const char *cudaGetErrorName(cudaError_t e) {
    static __thread char buf[96];
    int i = own_error(e);
    if (i >= 0) return own_errors[i].name;
    if (e == cudaSuccess) return "cudaSuccess";
    const char *s = NULL;
    if (cuGetErrorName((CUresult)e, &s) != CUDA_SUCCESS || !s || strncmp(s, "CUDA_ERROR_", 11) != 0)
        return "unrecognized error code";
    size_t n = snprintf(buf, sizeof buf, "cudaError");
    for (s += 11; *s && n + 1 < sizeof buf; s++) {
        int start = s[-1] == '_';
        if (*s != '_') buf[n++] = start ? *s : (char)(*s | 0x20); /* ASCII lower case */
    }
    buf[n] = 0;
    return buf;
}
EXPORT const char *cudaGetErrorString(cudaError_t e) {
    int i = own_error(e);
    if (i >= 0 && own_errors[i].text) return own_errors[i].text;
    const char *s = NULL;
    if (cuGetErrorString((CUresult)e, &s) != CUDA_SUCCESS || !s) return "unrecognized error code";
    return s;
}

/* ---- devices and the primary context each thread works in ---- */

__thread int cur_dev;
static __thread CUcontext bound; /* the primary context this thread made current, or NULL */
static CUcontext primary[MAX_DEVICES];
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_rc;

static void init(void) { init_rc = cuInit(0); }

/* ready makes the current device's primary context current on this thread (lazily, as the
 * runtime does). */
/* device_context is device d's primary context, retained on first use. */
CUresult device_context(int d, CUcontext *out) {
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return init_rc;
    if (d < 0 || d >= MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    CUresult rc = CUDA_SUCCESS;
    if (!primary[d]) {
        CUdevice dev;
        rc = cuDeviceGet(&dev, d);
        if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&primary[d], dev);
    }
    *out = primary[d];
    pthread_mutex_unlock(&mu);
    return rc;
}

CUresult ready(void) {
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return init_rc;
    CUcontext cur = NULL;
    if (bound && cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == bound) return CUDA_SUCCESS;
    CUcontext c = NULL;
    CUresult rc = device_context(cur_dev, &c);
    if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(c);
    if (rc == CUDA_SUCCESS) bound = c;
    return rc;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n) {
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return ret(init_rc);
    return ret(cuDeviceGetCount(n));
}

EXPORT cudaError_t cudaSetDevice(int d) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return e;
    if (d < 0 || d >= n || d >= MAX_DEVICES) return ret(CUDA_ERROR_INVALID_DEVICE);
    cur_dev = d;
    bound = NULL;
    return ret(ready());
}

EXPORT cudaError_t cudaGetDevice(int *d) {
    if (!d) return ret(CUDA_ERROR_INVALID_VALUE);
    *d = cur_dev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return ret(CUDA_ERROR_INVALID_VALUE);
    return ret(cuDriverGetVersion(v));
}

EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return ret(CUDA_ERROR_INVALID_VALUE);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    CUdevice dev;
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return ret(init_rc);
    CUresult rc = cuDeviceGet(&dev, d);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(v, (CUdevice_attribute)a, dev); /* same numbers */
    return ret(rc);
}

static cudaError_t properties(struct cudaDeviceProp *p, int d) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    memset(p, 0, sizeof *p);
    CUdevice dev;
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return ret(init_rc);
    CUresult rc = cuDeviceGet(&dev, d);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetName(p->name, sizeof p->name, dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetUuid((CUuuid *)&p->uuid, dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceTotalMem(&p->totalGlobalMem, dev);
    int v;
#define A(field, attr) \
    if (rc == CUDA_SUCCESS && (rc = cuDeviceGetAttribute(&v, attr, dev)) == CUDA_SUCCESS) p->field = v
    A(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    A(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    A(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    A(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    A(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    A(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    A(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    A(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    A(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    A(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    A(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    A(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    A(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    A(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    A(pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    A(pciDeviceID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    A(pciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    A(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    A(maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    A(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    A(sharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    A(sharedMemPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    A(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
    /* (Fields CUDA 13 dropped from cudaDeviceProp, such as clockRate, are not filled: they are
     * not there to fill. Programs read them through cudaDeviceGetAttribute.) */
    A(concurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
    /* By number: the guest library's cuda.h does not name them. */
    A(regsPerMultiprocessor, (CUdevice_attribute)82);
    A(managedMemory, (CUdevice_attribute)83);
    A(maxBlocksPerMultiProcessor, (CUdevice_attribute)106);
    A(reservedSharedMemPerBlock, (CUdevice_attribute)111);
#undef A
    if (rc == CUDA_SUCCESS) more_properties(p, dev);
    return ret(rc);
}
/* cuda_runtime_api.h maps cudaGetDeviceProperties to the _v2 name; older binaries use the plain one. */
#undef cudaGetDeviceProperties
#undef cudaGetDeviceProperties_v2
EXPORT cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int d);
EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d);
cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int d) { return properties(p, d); }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) { return properties(p, d); }

EXPORT cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d) {
    CUdevice dev;
    pthread_once(&init_once, init);
    if (init_rc != CUDA_SUCCESS) return ret(init_rc);
    CUresult rc = cuDeviceGet(&dev, d);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetPCIBusId(bus, len, dev);
    return ret(rc);
}

EXPORT cudaError_t cudaDeviceSynchronize(void) {
    READY();
    return ret(cuCtxSynchronize());
}

EXPORT cudaError_t cudaDeviceReset(void) {
    READY();
    CUdevice d;
    CUresult rc = cuCtxGetDevice(&d);
    if (rc == CUDA_SUCCESS) rc = cuCtxSynchronize();
    return ret(rc);
}

EXPORT cudaError_t cudaFree(void *p);

/* ---- memory ---- */

EXPORT cudaError_t cudaMalloc(void **p, size_t n) {
    if (!p) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdeviceptr d = 0;
    CUresult rc = n ? cuMemAlloc(&d, n) : CUDA_SUCCESS;
    *p = (void *)(uintptr_t)d;
    return ret(rc);
}

EXPORT cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    READY();
    return ret(cuMemFree((CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    READY();
    CUresult rc = cuMemHostAlloc(p, n, flags); /* cudaHostAlloc* flags are CU_MEMHOSTALLOC_* */
    if (rc == CUDA_SUCCESS) host_track(*p, n);
    return ret(rc);
}

EXPORT cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

EXPORT cudaError_t cudaFreeHost(void *p) {
    READY();
    CUresult rc = cuMemFreeHost(p);
    if (rc == CUDA_SUCCESS) host_untrack(p);
    return ret(rc);
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    READY();
    return ret(cuMemGetInfo(free_b, total));
}

static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream s, int async) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    switch (kind) {
    case cudaMemcpyHostToHost:
        if (async && s) {
            CUresult rc = cuStreamSynchronize(s);
            if (rc != CUDA_SUCCESS) return rc;
        }
        memmove(dst, src, n);
        return CUDA_SUCCESS;
    case cudaMemcpyHostToDevice:
        return async ? cuMemcpyHtoDAsync(d, src, n, s) : cuMemcpyHtoD(d, src, n);
    case cudaMemcpyDeviceToHost:
        return async ? cuMemcpyDtoHAsync(dst, sp, n, s) : cuMemcpyDtoH(dst, sp, n);
    case cudaMemcpyDeviceToDevice:
        return async ? cuMemcpyDtoDAsync(d, sp, n, s) : cuMemcpyDtoD(d, sp, n);
    case cudaMemcpyDefault: /* unified addressing: the driver tells host from device */
        return async ? cuMemcpyAsync(d, sp, n, s) : cuMemcpy(d, sp, n);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    READY();
    return ret(copy(dst, src, n, kind, NULL, 0));
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    READY();
    return ret(copy(dst, src, n, kind, (CUstream)s, 1));
}

EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) {
    READY();
    return ret(cuMemsetD8((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n));
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    READY();
    return ret(cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n, (CUstream)s));
}

/* ---- streams and events (cudaStream_t/cudaEvent_t are the driver's handles) ---- */

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (!s) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult rc = cuStreamCreate((CUstream *)s, flags);
    if (rc == CUDA_SUCCESS) stream_track(*s, flags);
    return ret(rc);
}
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int prio) {
    if (!s) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUresult rc = cuStreamCreateWithPriority((CUstream *)s, flags, prio);
    if (rc == CUDA_SUCCESS) stream_track(*s, flags);
    return ret(rc);
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
    READY();
    CUresult rc = cuStreamDestroy((CUstream)s);
    if (rc == CUDA_SUCCESS) stream_untrack(s);
    return ret(rc);
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    READY();
    return ret(cuStreamSynchronize((CUstream)s));
}
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) {
    READY();
    return ret(cuStreamQuery((CUstream)s));
}
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    READY();
    return ret(cuStreamWaitEvent((CUstream)s, (CUevent)e, flags));
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    READY();
    return ret(cuEventCreate((CUevent *)e, flags)); /* cudaEvent* flags are CU_EVENT_* */
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
    READY();
    return ret(cuEventDestroy((CUevent)e));
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    READY();
    return ret(cuEventRecord((CUevent)e, (CUstream)s));
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    READY();
    return ret(cuEventSynchronize((CUevent)e));
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
    READY();
    return ret(cuEventQuery((CUevent)e));
}
EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    READY();
    return ret(cuEventElapsedTime(ms, (CUevent)a, (CUevent)b));
}

/* ---- fat binaries, kernels and launches ---- */

/* A fat binary nvcc registered at start-up; its module is loaded per device on first launch. */
struct fatbin {
    const void *wrapper;
    CUmodule mod[MAX_DEVICES];
};

/* A kernel: the host stub's address (what cudaLaunchKernel gets) and its device name. */
struct kernel {
    const void *host;
    const char *name;
    struct fatbin *fb;
    CUfunction fn[MAX_DEVICES];
    struct kernel *next;
};
static struct kernel *kernels;

/* fatbin_image is the fat binary inside nvcc's wrapper ({u32 magic 0x466243b1, u32 version,
 * const void *data, ...}). */
static const void *fatbin_image(const void *wrapper) {
    uint32_t magic;
    memcpy(&magic, wrapper, 4);
    if (magic != 0x466243b1u) return wrapper;
    const void *data;
    memcpy(&data, (const char *)wrapper + 8, sizeof data);
    return data;
}

EXPORT void **__cudaRegisterFatBinary(void *wrapper) {
    struct fatbin *fb = calloc(1, sizeof *fb);
    if (!fb) abort(); /* start-up, before main: nothing can be reported */
    fb->wrapper = wrapper;
    return (void **)fb;
}

EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

EXPORT void __cudaUnregisterFatBinary(void **handle) {
    (void)handle; /* at exit: the session's end frees the modules */
}

EXPORT void __cudaRegisterFunction(void **handle, const char *host, char *dev, const char *name, int limit,
                                   uint3 *tid, uint3 *bid, dim3 *bdim, dim3 *gdim, int *wsize) {
    (void)dev; (void)limit; (void)tid; (void)bid; (void)bdim; (void)gdim; (void)wsize;
    struct kernel *k = calloc(1, sizeof *k);
    if (!k) abort();
    k->host = host;
    k->name = name;
    k->fb = (struct fatbin *)handle;
    pthread_mutex_lock(&mu);
    k->next = kernels;
    kernels = k;
    pthread_mutex_unlock(&mu);
}

/* A device variable (__device__ or __constant__) the host names by its shadow's address, for
 * cudaMemcpyToSymbol and friends: found in its module on the current device on first use. */
struct var {
    const void *host;
    /* A managed variable (__cudaRegisterManagedVar): where the program's code keeps the pointer it
     * reads and writes the variable through, which __cudaInitModule sets to its unified address. */
    void **managed_host;
    const char *name;
    struct fatbin *fb;
    CUdeviceptr ptr[MAX_DEVICES];
    size_t size[MAX_DEVICES];
    struct var *next;
};
static struct var *vars;

/* register_var records a variable of the fat binary handle: a plain one by its host shadow, a
 * managed one by where the program keeps its pointer. */
static void register_var(void **handle, const void *host, void **managed_host, const char *name) {
    struct var *v = calloc(1, sizeof *v);
    if (!v) abort(); /* start-up, before main: nothing can be reported */
    v->host = host;
    v->managed_host = managed_host;
    v->name = name;
    v->fb = (struct fatbin *)handle;
    pthread_mutex_lock(&mu);
    v->next = vars;
    vars = v;
    pthread_mutex_unlock(&mu);
}

EXPORT void __cudaRegisterVar(void **handle, char *host, char *dev, const char *name, int ext, size_t size,
                              int constant, int global) {
    (void)dev; (void)ext; (void)size; (void)constant; (void)global;
    register_var(handle, host, NULL, name);
}
EXPORT void __cudaRegisterManagedVar(void **handle, void **host, char *dev, const char *name, int ext,
                                     size_t size, int constant, int global) {
    (void)dev; (void)ext; (void)size; (void)constant; (void)global;
    register_var(handle, NULL, host, name);
}

static CUresult module_locked(struct fatbin *fb, CUmodule *out);

/* __cudaInitModule runs before the program's host code first touches a managed variable of the
 * fat binary: the module is loaded on the current device and each managed variable's pointer set
 * to its address, which the driver makes the host's too (driver/api_module.c). 1: done. */
EXPORT char __cudaInitModule(void **handle) {
    if (ready() != CUDA_SUCCESS) return 0;
    struct fatbin *fb = (struct fatbin *)handle;
    pthread_mutex_lock(&mu);
    CUmodule m;
    CUresult rc = module_locked(fb, &m);
    for (struct var *v = vars; v && rc == CUDA_SUCCESS; v = v->next) {
        if (v->fb != fb || !v->managed_host) continue;
        if (!v->ptr[cur_dev]) rc = cuModuleGetGlobal(&v->ptr[cur_dev], &v->size[cur_dev], m, v->name);
        if (rc == CUDA_SUCCESS) *v->managed_host = (void *)(uintptr_t)v->ptr[cur_dev];
    }
    pthread_mutex_unlock(&mu);
    if (rc != CUDA_SUCCESS) {
        const char *e = "?";
        cuGetErrorName(rc, &e);
        fprintf(stderr, "gpucloud: the fat binary's managed variables could not be set up (%s)\n", e);
    }
    return rc == CUDA_SUCCESS;
}

/* The launch configuration a <<<...>>> pushes and the kernel's host stub pops. */
struct config {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
};
static __thread struct config configs[8];
static __thread int nconfigs;

EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, cudaStream_t stream) {
    if (nconfigs == 8) return 1;
    configs[nconfigs++] = (struct config){grid, block, shared, stream};
    return 0;
}

EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream) {
    if (nconfigs == 0) return ret(CUDA_ERROR_INVALID_VALUE);
    struct config c = configs[--nconfigs];
    *grid = c.grid;
    *block = c.block;
    *shared = c.shared;
    *(cudaStream_t *)stream = c.stream;
    return cudaSuccess;
}

static struct kernel *find_locked(const void *host) {
    struct kernel *k = kernels;
    while (k && k->host != host) k = k->next;
    return k;
}

/* kernel_function is k's function on the current device, its module loaded on first use. */
/* module_locked is fb's module on the current device, loaded on first use. Caller holds mu. */
static CUresult module_locked(struct fatbin *fb, CUmodule *out) {
    CUresult rc = CUDA_SUCCESS;
    if (!fb->mod[cur_dev]) rc = cuModuleLoadData(&fb->mod[cur_dev], fatbin_image(fb->wrapper));
    *out = fb->mod[cur_dev];
    return rc;
}

static CUresult kernel_function(struct kernel *k, CUfunction *out) {
    pthread_mutex_lock(&mu);
    CUresult rc = k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; /* cudaErrorInvalidResourceHandle */
    if (k && !k->fn[cur_dev]) {
        CUmodule m;
        rc = module_locked(k->fb, &m);
        if (rc == CUDA_SUCCESS) rc = cuModuleGetFunction(&k->fn[cur_dev], m, k->name);
    }
    if (rc == CUDA_SUCCESS) *out = k->fn[cur_dev];
    pthread_mutex_unlock(&mu);
    return rc;
}

CUresult function(const void *host, CUfunction *out) {
    pthread_mutex_lock(&mu);
    struct kernel *k = find_locked(host);
    pthread_mutex_unlock(&mu);
    return kernel_function(k, out);
}

static cudaError_t launch(CUfunction f, dim3 g, dim3 b, void **args, size_t shared, CUstream s) {
    return ret(cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shared, s, args, NULL));
}

/* CUDA 12.4+ launch stubs: a kernel handle is fetched once per stub (__cudaGetKernel), then each
 * <<<...>>> launches through it (__cudaLaunchKernel). Our handle is the registration record. */
EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *host) {
    if (!out) return ret(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&mu);
    struct kernel *k = find_locked(host);
    pthread_mutex_unlock(&mu);
    *out = (cudaKernel_t)k;
    return k ? cudaSuccess : ret(CUDA_ERROR_INVALID_HANDLE);
}
EXPORT cudaError_t cudaGetKernel(cudaKernel_t *out, const void *host) { return __cudaGetKernel(out, host); }

EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
    READY();
    CUfunction f;
    CUresult rc = kernel_function((struct kernel *)kernel, &f);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return launch(f, g, b, args, shared, (CUstream)s);
}
/* The per-thread-default-stream flavour: this runtime's default stream is the legacy one, which
 * orders work at least as strictly. */
EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
    return __cudaLaunchKernel(kernel, g, b, args, shared, s);
}

EXPORT cudaError_t cudaLaunchKernel(const void *host, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t s) {
    READY();
    CUfunction f;
    CUresult rc = function(host, &f);
    if (rc != CUDA_SUCCESS) return ret(rc);
    return launch(f, g, b, args, shared, (CUstream)s);
}

EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *host) {
    if (!a) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUfunction f;
    CUresult rc = function(host, &f);
    memset(a, 0, sizeof *a);
    int v;
#define A(field, attr) \
    if (rc == CUDA_SUCCESS && (rc = cuFuncGetAttribute(&v, attr, f)) == CUDA_SUCCESS) a->field = v
    A(maxThreadsPerBlock, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    A(sharedSizeBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    A(numRegs, CU_FUNC_ATTRIBUTE_NUM_REGS);
    A(ptxVersion, CU_FUNC_ATTRIBUTE_PTX_VERSION);
    A(binaryVersion, CU_FUNC_ATTRIBUTE_BINARY_VERSION);
    A(constSizeBytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
    A(localSizeBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    A(maxDynamicSharedSizeBytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    A(preferredShmemCarveout, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
#undef A
    return ret(rc);
}

/* ---- device variables ---- */

#define ERROR_INVALID_SYMBOL 13 /* cudaErrorInvalidSymbol: the driver has no such code */

/* symbol finds a registered variable's address and size on the current device. */
static cudaError_t symbol(const void *host, CUdeviceptr *ptr, size_t *size) {
    pthread_mutex_lock(&mu);
    struct var *v = vars; /* a managed variable's symbol is its unified address */
    while (v && v->host != host && !(host && v->managed_host && *v->managed_host == host)) v = v->next;
    CUresult rc = CUDA_SUCCESS;
    if (v && !v->ptr[cur_dev]) {
        CUmodule m;
        rc = module_locked(v->fb, &m);
        if (rc == CUDA_SUCCESS) rc = cuModuleGetGlobal(&v->ptr[cur_dev], &v->size[cur_dev], m, v->name);
    }
    if (v && rc == CUDA_SUCCESS) {
        *ptr = v->ptr[cur_dev];
        *size = v->size[cur_dev];
    }
    pthread_mutex_unlock(&mu);
    if (!v) return last_error = (cudaError_t)ERROR_INVALID_SYMBOL;
    return ret(rc);
}

/* symbol_range checks [offset, offset+n) lies inside the variable and gives its device address. */
static cudaError_t symbol_range(const void *host, size_t n, size_t offset, CUdeviceptr *at) {
    READY();
    CUdeviceptr p;
    size_t size;
    cudaError_t e = symbol(host, &p, &size);
    if (e != cudaSuccess) return e;
    if (offset > size || n > size - offset) return ret(CUDA_ERROR_INVALID_VALUE);
    *at = p + offset;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetSymbolAddress(void **dev, const void *host) {
    if (!dev) return ret(CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr p;
    cudaError_t e = symbol_range(host, 0, 0, &p);
    if (e == cudaSuccess) *dev = (void *)(uintptr_t)p;
    return e;
}

EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *host) {
    if (!size) return ret(CUDA_ERROR_INVALID_VALUE);
    READY();
    CUdeviceptr p;
    return symbol(host, &p, size);
}

/* to_symbol copies into a variable: the source is host memory or, for DeviceToDevice, device. */
static cudaError_t to_symbol(const void *host, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind,
                             CUstream s, int async) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return ret(CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr at;
    cudaError_t e = symbol_range(host, n, offset, &at);
    if (e != cudaSuccess) return e;
    return ret(copy((void *)(uintptr_t)at, src, n, kind, s, async));
}

static cudaError_t from_symbol(void *dst, const void *host, size_t n, size_t offset, enum cudaMemcpyKind kind,
                               CUstream s, int async) {
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return ret(CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr at;
    cudaError_t e = symbol_range(host, n, offset, &at);
    if (e != cudaSuccess) return e;
    return ret(copy(dst, (const void *)(uintptr_t)at, n, kind, s, async));
}

EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset,
                                      enum cudaMemcpyKind kind) {
    return to_symbol(symbol, src, n, offset, kind, NULL, 0);
}
EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t s) {
    return to_symbol(symbol, src, n, offset, kind, (CUstream)s, 1);
}
EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset,
                                        enum cudaMemcpyKind kind) {
    return from_symbol(dst, symbol, n, offset, kind, NULL, 0);
}
EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset,
                                             enum cudaMemcpyKind kind, cudaStream_t s) {
    return from_symbol(dst, symbol, n, offset, kind, (CUstream)s, 1);
}

/* ---- stream priorities ---- */

DRIVER_SLOT(cuCtxGetStreamPriorityRange);

/* The driver's range where it has one; the guest library schedules no priorities (it creates every
 * stream at the same one), so there the range is empty, as on a device without priorities, and
 * a priority given at creation is clamped to 0. */
EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    READY();
    CUresult (*f)(int *, int *) = DRIVER(CUresult(*)(int *, int *), cuCtxGetStreamPriorityRange);
    if (f) return ret(f(least, greatest));
    if (least) *least = 0;
    if (greatest) *greatest = 0;
    return cudaSuccess;
}

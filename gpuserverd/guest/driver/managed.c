/* Managed memory (cuMemAllocManaged). Over shared memory, where the GPU's atomics on host memory
 * are atomic with the CPU's (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED): one copy that the
 * program and the device both address by the same pointer. It comes from the shared arena, which
 * the worker registered device-mapped (hostreg.c's ShmDevicePointer); the arena is mapped a
 * second time in this process at exactly its device address (transport's gc_shm_alias_at), so the
 * pointer handed out is the program's and the device's alike. The memory stays in host RAM and
 * the GPU reaches it over the bus (as with zero-copy), so it is correct but not fast; it counts
 * against the arena, not the device quota. Elsewhere (TCP; a GPU on PCIe whose system-scope
 * atomics on mapped host memory are not atomic with the CPU's, as the CUDA guide warns, which is
 * the H100's case and broke NVIDIA's systemWideAtomics; an arena that is full or whose device
 * address is taken here) it is device memory kept coherent with a host shadow at the same
 * address by software (coherence.c), charged to the device quota; the device then reports no
 * concurrent managed access, so CPU and GPU take turns and their atomics never meet.
 * GPUCLOUD_MANAGED=arena or =coherent chooses either over shared memory. Prefetches, advice and
 * stream attachment are hints and succeed for managed memory; attachment tells coherence which
 * stream to wait for. */
#include "guest.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/coherence.h"

static pthread_mutex_t alias_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t device_base; /* the arena's device address, once aliased */

static CUresult refuse(const char *why) {
    if (gc_trace_on()) gc_trace("cuMemAllocManaged: not in the shared arena (%s): software coherence", why);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* alias makes the arena addressable at its device address here; device_base is then set. */
static CUresult alias(void) {
    if (__atomic_load_n(&device_base, __ATOMIC_ACQUIRE)) return CUDA_SUCCESS;
    if (!gc_shm_on()) return refuse("no arena");
    uint64_t base;
    CUresult rc = gc_arena_device_base(&base);
    if (rc != CUDA_SUCCESS) return rc == CUDA_ERROR_NOT_SUPPORTED ? refuse("this server cannot map host memory") : rc;
    pthread_mutex_lock(&alias_mu);
    char *a = gc_shm_alias_at(base);
    pthread_mutex_unlock(&alias_mu);
    if (!a) return refuse("the device's address of the shared arena is taken in this process");
    __atomic_store_n(&device_base, base, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* managed_offset: whether [p, p+n) is managed memory; its arena offset. */
static int managed_offset(CUdeviceptr p, size_t n, uint64_t *off) {
    uint64_t base = __atomic_load_n(&device_base, __ATOMIC_ACQUIRE);
    if (!base || p < base) return 0;
    uint64_t arena_off;
    if (!gc_shm_offset(gc_shm_base() + (p - base), &arena_off) || arena_off != p - base) return 0;
    uint64_t end_off;
    if (n > 1 && !gc_shm_offset(gc_shm_base() + (p - base) + n - 1, &end_off)) return 0;
    *off = arena_off;
    return 1;
}

/* gc_managed_coherent: whether device dev's managed memory is kept by coherence over this session
 * (decided once: the attribute does not change). */
int gc_managed_coherent(int dev) {
    static int decided = -1;
    int v = __atomic_load_n(&decided, __ATOMIC_ACQUIRE);
    if (v >= 0) return v;
    const char *env = getenv("GPUCLOUD_MANAGED");
    if (!gc_shm_on()) v = 1;
    else if (env && !strcmp(env, "arena")) v = 0;
    else if (env && !strcmp(env, "coherent")) v = 1;
    else v = !gc_host_native_atomics(dev);
    __atomic_store_n(&decided, v, __ATOMIC_RELEASE);
    return v;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned flags) {
    if (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return GC_T(CUDA_ERROR_INVALID_VALUE);
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    if (gc_shm_on() && !gc_managed_coherent(dev) && alias() == CUDA_SUCCESS) {
        char *p = gc_shm_alloc(bytes);
        if (p) {
            *dptr = device_base + (uint64_t)(p - gc_shm_base());
            return GC_T(CUDA_SUCCESS);
        }
    }
    void *p;
    rc = gc_coh_alloc(&p, bytes, GC_COH_MANAGED);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
    return GC_T(rc);
}

/* gc_managed_free frees p if it is managed memory, after the context's work (a kernel may still
 * be using it, as cuMemFree waits for it): 1 if it was. */
int gc_managed_free(CUdeviceptr p) {
    uint64_t off;
    if (!managed_offset(p, 1, &off)) return gc_coh_free((void *)(uintptr_t)p, GC_COH_MANAGED);
    (void)cuCtxSynchronize();
    return gc_shm_free(gc_shm_base() + off);
}

/* Hints: the memory is where both sides reach it already. */
static CUresult hint(CUdeviceptr p, size_t n) {
    uint64_t off;
    int kind = 0;
    if (managed_offset(p, n ? n : 1, &off)) return GC_T(CUDA_SUCCESS);
    return GC_T(gc_coh_find((void *)(uintptr_t)p, n, &kind) && kind == GC_COH_MANAGED ? CUDA_SUCCESS
                                                                                     : CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s) {
    (void)dst, (void)s;
    return hint(p, n);
}
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s) {
    (void)loc, (void)flags, (void)s;
    return hint(p, n);
}
EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice dev) {
    (void)advice, (void)dev;
    return hint(p, n);
}
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    (void)advice, (void)loc;
    return hint(p, n);
}
EXPORT CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned flags) {
    CUresult rc = hint(p, n); /* n 0: the whole allocation */
    /* flags 0: the runtime's prefetch and advice, checking only (driver/coherence.c keeps the stream) */
    if (rc == CUDA_SUCCESS && flags && gc_coh_find((void *)(uintptr_t)p, 0, NULL))
        rc = gc_coh_attach((void *)(uintptr_t)p, s, flags);
    return GC_T(rc);
}

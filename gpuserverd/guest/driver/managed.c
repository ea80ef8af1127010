/* Managed memory (cuMemAllocManaged) over shared memory: one copy that the program and the device
 * both address by the same pointer. It comes from the shared arena, which the worker registered
 * device-mapped (hostreg.c's ShmDevicePointer); the arena is mapped a second time in this process
 * at exactly its device address (transport's gc_shm_alias_at), so the pointer handed out is the
 * program's and the device's alike. The memory stays in host RAM and the GPU reaches it over the
 * bus (as with zero-copy), so it is correct but not fast; it counts against the arena, not the
 * device quota. Prefetches, advice and stream attachment are hints and succeed for it. Over TCP
 * (no common memory) and where the device's address is taken in this process, it is refused with
 * CUDA_ERROR_NOT_SUPPORTED, said once. */
#include "guest.h"

#include <stdint.h>
#include <stdio.h>

static pthread_mutex_t alias_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t device_base; /* the arena's device address, once aliased */

static CUresult refuse(const char *why) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "gpucloud: cuMemAllocManaged: managed memory needs shared memory with gpuserverd (a process on the "
                        "GPU's host); %s (CUDA_ERROR_NOT_SUPPORTED)\n", why);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* alias makes the arena addressable at its device address here; device_base is then set. */
static CUresult alias(void) {
    if (__atomic_load_n(&device_base, __ATOMIC_ACQUIRE)) return CUDA_SUCCESS;
    if (!gc_shm_on()) return refuse("over TCP it is not offered");
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

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned flags) {
    if (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return GC_T(CUDA_ERROR_INVALID_VALUE);
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc == CUDA_SUCCESS) rc = alias();
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    char *p = gc_shm_alloc(bytes);
    if (!p) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    *dptr = device_base + (uint64_t)(p - gc_shm_base());
    return GC_T(CUDA_SUCCESS);
}

/* gc_managed_free frees p if it is managed memory, after the context's work (a kernel may still
 * be using it, as cuMemFree waits for it): 1 if it was. */
int gc_managed_free(CUdeviceptr p) {
    uint64_t off;
    if (!managed_offset(p, 1, &off)) return 0;
    (void)cuCtxSynchronize();
    return gc_shm_free(gc_shm_base() + off);
}

/* Hints: the memory is where both sides reach it already. */
static CUresult hint(CUdeviceptr p, size_t n) {
    uint64_t off;
    return GC_T(managed_offset(p, n ? n : 1, &off) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
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
    (void)s, (void)flags;
    return hint(p, n); /* n 0: the whole allocation */
}

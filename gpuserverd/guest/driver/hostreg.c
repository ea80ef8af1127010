/* cuMemHostRegister and cuMemHostUnregister: the API's checks around the transport's registry of
 * host ranges (transport/hostreg.c), which moves their pages into a shared arena where it can. */
#include "guest.h"

#include "driver/coherence.h"

#include <stdint.h>
#include <stdio.h>

#define KNOWN_FLAGS (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    if (!p || n == 0 || (flags & ~(unsigned)KNOWN_FLAGS) || (uintptr_t)p + n < (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = gc_current_device(&dev); /* as in CUDA: needs a current context */
    if (rc != CUDA_SUCCESS) return rc;
    return gc_hostreg_register(p, n, flags);
}
ALIAS(cuMemHostRegister, cuMemHostRegister_v2);

/* cuMemHostUnregister of a range whose pages are in the arena first waits for the current
 * context's work (an async copy may still be reading or writing them; CUDA's own call may likewise
 * return an earlier asynchronous error), then moves the pages back. */
EXPORT CUresult cuMemHostUnregister(void *p) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    CUresult sync = gc_hostreg_moved(p) ? cuCtxSynchronize() : CUDA_SUCCESS; /* unlocked: a call of its own */
    rc = gc_hostreg_unregister(p);
    return rc != CUDA_SUCCESS ? rc : sync;
}

/* cuMemHostGetDevicePointer: mapped pinned memory (cuMemHostAlloc) and registered ranges lie in the
 * shared arena when the session has one (a process on the GPU's host, a VM's ivshmem channel),
 * which the worker registered device-mapped: the device address is the arena's (asked once) plus
 * the offset, and a kernel reads and writes the program's bytes there with no copy. Without an
 * arena, cuMemHostAlloc's memory is device memory kept coherent with the program's pages
 * (coherence.c; plain pinned memory from the first time a kernel may see it, coh_pinned.c) at the
 * same address, which is then its device pointer; other host memory is in another machine:
 * refused (CUDA_ERROR_NOT_SUPPORTED), saying so once. */
static uint64_t arena_device_base;

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned flags) {
    if (!pdptr || !p || flags != 0) return GC_T(CUDA_ERROR_INVALID_VALUE);
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    uint64_t off;
    int kind;
    (void)gc_coh_promote(p); /* plain pinned memory: its device side from now on */
    if (gc_coh_find(p, 0, &kind) && kind == GC_COH_MAPPED_HOST) { /* coherent: the same address, as on UVA */
        *pdptr = (CUdeviceptr)(uintptr_t)p;
        return GC_T(CUDA_SUCCESS);
    }
    if (!gc_shm_offset(p, &off)) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpucloud: cuMemHostGetDevicePointer: mapped host memory is shared memory with gpuserverd "
                            "(a process on the GPU's host, a VM's ivshmem channel); %s\n",
                    gc_shm_on() || gc_ivshmem_on() ? "this memory is not in it (allocate it with cuMemHostAlloc)"
                                                   : "over TCP only memory from cuMemHostAlloc / cuMemAllocHost "
                                                     "(cudaHostAlloc, cudaMallocHost) has one, kept coherent by software; "
                                                     "registered memory has none (CUDA_ERROR_NOT_SUPPORTED)");
        return GC_T(gc_shm_on() || gc_ivshmem_on() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED);
    }
    uint64_t base;
    rc = gc_arena_device_base(&base);
    if (rc == CUDA_SUCCESS) *pdptr = base + off;
    return GC_T(rc);
}

/* gc_arena_device_base asks the worker, once, for the device address of the shared arena. */
CUresult gc_arena_device_base(uint64_t *base) {
    *base = __atomic_load_n(&arena_device_base, __ATOMIC_ACQUIRE);
    if (*base) return CUDA_SUCCESS;
    if ((*base = gc_shm_device_address()) != 0) return CUDA_SUCCESS; /* told at ShmOpen */
    struct gw_shm_device_pointer m = {0};
    GC_ENCODE(shm_device_pointer, m, b);
    struct gw_handle_reply hr;
    CUresult rc = gc_request(GW_TYPE_SHM_DEVICE_POINTER, 0, b, b_n, GW_TYPE_HANDLE_REPLY, &hr);
    if (rc != CUDA_SUCCESS) return rc;
    *base = hr.handle;
    __atomic_store_n(&arena_device_base, *base, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}
ALIAS(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);

/* gc_arena_device_addr: whether [p, p+n) lies in the shared arena contiguously, and if so its
 * device address (*addr): host memory a graph may name, since the device reaches it at replay. */
int gc_arena_device_addr(const void *p, size_t n, uint64_t *addr) {
    uint64_t off, end, base;
    if (!p || !gc_shm_offset(p, &off)) return 0;
    if (n > 1 && (!gc_shm_offset((const char *)p + n - 1, &end) || end != off + n - 1)) return 0;
    if (gc_arena_device_base(&base) != CUDA_SUCCESS || !base) return 0;
    *addr = base + off;
    return 1;
}

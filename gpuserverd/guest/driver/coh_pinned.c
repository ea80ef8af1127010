/* Plain pinned memory (cuMemAllocHost, cuMemHostAlloc without DEVICEMAP) where there is no shared
 * arena. On UVA every pinned pointer is also a device pointer, and kernels use it so: a flag a
 * kernel spins on (p2pBandwidthLatencyTest's delay, UnifiedMemoryPerf's latch), a buffer read in
 * place. Over TCP the program's memory is in another machine, so such memory has to become device
 * memory kept coherent (coherence.c), at the same address. But most pinned memory is only ever the
 * host side of copies (a data loader's batches, a staging buffer): made coherent up front, each
 * CPU write after a copy would fault, wait for the device and fetch, and every byte would cost
 * device memory. So it starts lazy: device addresses reserved (no device memory, nothing charged)
 * and an ordinary read-write host mapping at them, which no other part of coherence sees; copies
 * from and to it are host copies as before. Only when a kernel may see it (its address in a
 * launch's or a kernel node's parameters, cuMemHostGetDevicePointer) is the reservation backed
 * (cuMemCreate + cuMemMap, charged then) and the allocation becomes mapped host memory: every page
 * DIRTY, pushed by the next hand-over, coherent from then on. */
#define _GNU_SOURCE
#include "guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "driver/coherence_int.h"

size_t gc_coh_lazy_total;
/* The span of addresses lazy memory has had (never narrowed): a launch's words outside it are not
 * looked up. Inside it, the lazy allocations sorted by address (under gc_coh_mu) answer in a
 * binary search: a launch's device pointers often lie among the reservations. */
static uintptr_t lazy_lo = UINTPTR_MAX, lazy_hi;
static struct coh **lazy;
static size_t lazy_cap;

static size_t lazy_index_locked(uintptr_t a) { /* the first lazy allocation above a */
    size_t lo = 0, hi = gc_coh_lazy_total;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (lazy[mid]->addr <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

CUresult gc_coh_lazy_add_locked(struct coh *c) {
    size_t n = gc_coh_lazy_total;
    if (n == lazy_cap) {
        size_t cap = lazy_cap ? 2 * lazy_cap : 64;
        struct coh **l = realloc(lazy, cap * sizeof *l);
        if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
        lazy = l, lazy_cap = cap;
    }
    size_t i = lazy_index_locked(c->addr);
    memmove(lazy + i + 1, lazy + i, (n - i) * sizeof *lazy);
    lazy[i] = c;
    __atomic_store_n(&gc_coh_lazy_total, n + 1, __ATOMIC_RELEASE);
    uintptr_t lo = __atomic_load_n(&lazy_lo, __ATOMIC_RELAXED), hi = __atomic_load_n(&lazy_hi, __ATOMIC_RELAXED);
    if (c->addr < lo) __atomic_store_n(&lazy_lo, c->addr, __ATOMIC_RELEASE);
    if (c->addr + c->len > hi) __atomic_store_n(&lazy_hi, c->addr + c->len, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

void gc_coh_lazy_remove_locked(struct coh *c) {
    size_t n = gc_coh_lazy_total, i = lazy_index_locked(c->addr);
    if (i == 0 || lazy[i - 1] != c) return;
    memmove(lazy + i - 1, lazy + i, (n - i) * sizeof *lazy);
    __atomic_store_n(&gc_coh_lazy_total, n - 1, __ATOMIC_RELEASE);
}

int gc_coh_lazy_any(void) { return __atomic_load_n(&gc_coh_lazy_total, __ATOMIC_ACQUIRE) != 0; }

/* granularity: the current device's allocation properties and granularity (asked once a device). */
static CUresult granularity(CUmemAllocationProp *prop, size_t *g) {
    static size_t known[64];
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
    if (dev >= 0 && dev < 64 && (*g = __atomic_load_n(&known[dev], __ATOMIC_ACQUIRE)) != 0) return CUDA_SUCCESS;
    rc = cuMemGetAllocationGranularity(g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc == CUDA_SUCCESS && dev >= 0 && dev < 64) __atomic_store_n(&known[dev], *g, __ATOMIC_RELEASE);
    return rc;
}

CUresult gc_coh_reserve(size_t len, CUdeviceptr *base, size_t *vlen) {
    CUmemAllocationProp prop;
    size_t g = 0;
    CUresult rc = granularity(&prop, &g);
    if (rc != CUDA_SUCCESS) return rc;
    if (g == 0 || len > SIZE_MAX - g) return CUDA_ERROR_OUT_OF_MEMORY;
    *vlen = (len + g - 1) / g * g;
    return cuMemAddressReserve(base, *vlen, g, 0, 0);
}

void gc_coh_free_device(struct coh *c) {
    if (!c->vmm) {
        (void)cuMemFree_v2(c->dev_base);
        return;
    }
    if (!c->lazy) {
        (void)cuMemUnmap(c->dev_base, c->vlen);
        (void)cuMemRelease(c->phys);
    }
    (void)cuMemAddressFree(c->dev_base, c->vlen);
}

/* back_locked gives c's reservation device memory the device may read and write. In c's context. */
static CUresult back_locked(struct coh *c) {
    CUmemAllocationProp prop;
    size_t g = 0;
    CUresult rc = granularity(&prop, &g);
    if (rc == CUDA_SUCCESS) rc = cuMemCreate(&c->phys, c->vlen, &prop, 0);
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuMemMap(c->dev_base, c->vlen, 0, c->phys, 0);
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = cuMemSetAccess(c->dev_base, c->vlen, &acc, 1);
        if (rc != CUDA_SUCCESS) (void)cuMemUnmap(c->dev_base, c->vlen);
    }
    if (rc != CUDA_SUCCESS) (void)cuMemRelease(c->phys);
    return rc;
}

int gc_coh_promote(const void *p) {
    if (!__atomic_load_n(&gc_coh_lazy_total, __ATOMIC_ACQUIRE) || gc_coh_busy_thread) return 0;
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&gc_coh_mu);
    size_t i = lazy_index_locked(a);
    struct coh *c = i > 0 && a - lazy[i - 1]->addr < lazy[i - 1]->len ? lazy[i - 1] : NULL;
    int ok = c != NULL;
    if (c) {
        gc_coh_busy_thread++;
        CUcontext was = NULL;
        (void)cuCtxPushCurrent_v2(c->ctx);
        CUresult rc = back_locked(c);
        (void)cuCtxPopCurrent_v2(&was);
        gc_coh_busy_thread--;
        if (rc == CUDA_SUCCESS) { /* every page the host's, pushed at the next hand-over */
            size_t n = c->len / gc_coh_page;
            gc_coh_lazy_remove_locked(c);
            c->lazy = 0;
            c->host_pages = n;
            __atomic_add_fetch(&gc_coh_host_pages_total, n, __ATOMIC_RELEASE);
            if (gc_trace_on()) gc_trace("plain pinned memory at %#lx (%zu bytes) is now the device's too", (unsigned long)c->addr, c->bytes);
        } else {
            static int said;
            const char *name = "?";
            cuGetErrorName(rc, &name);
            if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
                fprintf(stderr, "gpucloud: pinned memory at %#lx passed to the device could not be given device memory "
                                "(%s); a kernel using it will fault\n", (unsigned long)c->addr, name);
            ok = 0;
        }
    }
    pthread_mutex_unlock(&gc_coh_mu);
    return ok;
}

void gc_coh_promote_words(const void *p, size_t n) {
    if (!p || !__atomic_load_n(&gc_coh_lazy_total, __ATOMIC_ACQUIRE)) return;
    for (size_t off = 0; off + 8 <= n; off += 8) { /* pointers lie 8-aligned from the parameters' start */
        uint64_t v;
        memcpy(&v, (const char *)p + off, 8);
        if (v >= __atomic_load_n(&lazy_lo, __ATOMIC_ACQUIRE) && v < __atomic_load_n(&lazy_hi, __ATOMIC_ACQUIRE))
            (void)gc_coh_promote((const void *)(uintptr_t)v);
    }
}

/* Registered host ranges, the transport's part of cuMemHostRegister (driver/hostreg.c is the
 * API's): page-locking the caller's own memory. With a shared arena (a guest on the
 * GPU's host) the whole pages inside the range are moved into the arena: their contents are
 * copied to an arena block, which is then mapped over them at the same address (MAP_FIXED,
 * MAP_SHARED). The program sees the same memory; the worker sees it in the arena it registered
 * with the driver, so a copy from or to it is one DMA, like cuMemAllocHost memory. The partial
 * pages at either end stay where they are (their other bytes belong to someone else) and their
 * copies are staged, as are whole ranges that cannot move (see docs/gpuserverd/transports.md, "Registered
 * host memory"). cuMemHostUnregister puts private pages with the same contents back.
 *
 * A registration either way keeps CUDA's bookkeeping: overlapping ranges are refused, and only a
 * registered base address can be unregistered. */
#include "transport.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAGE 4096u

struct hostreg {
    char *p;
    size_t n;
    unsigned flags;
    char *zc; /* the whole pages moved into the arena (zc_n 0: none, staged) */
    size_t zc_n;
    uint64_t off; /* their arena offset */
    int held;     /* other threads' writes were held while they moved */
};

/* Guarded by gc.mu: copies read the table while they hold it. */
static struct hostreg *regs;
static size_t nregs, cregs;

int gc_hostreg_span(const char *p, size_t n, uint64_t *off, size_t *len) {
    size_t before = n;
    for (size_t i = 0; i < nregs; i++) {
        const struct hostreg *r = &regs[i];
        if (r->zc_n == 0) continue;
        if (p >= r->zc && p < r->zc + r->zc_n) {
            size_t left = (size_t)(r->zc + r->zc_n - p);
            *off = r->off + (uint64_t)(p - r->zc);
            *len = n < left ? n : left;
            return 1;
        }
        if (r->zc > p && (size_t)(r->zc - p) < before) before = (size_t)(r->zc - p);
    }
    *len = before;
    return 0;
}

/* find is the index of the registration based at p, or nregs. */
static size_t find(const void *p) {
    size_t i = 0;
    while (i < nregs && regs[i].p != p) i++;
    return i;
}

static int overlaps(const char *p, size_t n) {
    for (size_t i = 0; i < nregs; i++)
        if (p < regs[i].p + regs[i].n && regs[i].p < p + n) return 1;
    return 0;
}

CUresult gc_hostreg_register(void *p, size_t n, unsigned flags) {
    /* Device-visible I/O memory (another device's BAR) cannot be reached by a remote GPU. */
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&gc.mu);
    if (overlaps(p, n) || gc_shm_contains(p, n)) {
        pthread_mutex_unlock(&gc.mu);
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (nregs == cregs) {
        size_t c = cregs ? 2 * cregs : 16;
        struct hostreg *nr = realloc(regs, c * sizeof *nr);
        if (!nr) {
            pthread_mutex_unlock(&gc.mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        regs = nr;
        cregs = c;
    }
    struct hostreg r = {.p = p, .n = n, .flags = flags};
    char *lo = (char *)(((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
    char *hi = (char *)(((uintptr_t)p + n) & ~(uintptr_t)(PAGE - 1));
    const char *why = "no shared arena";
    if (gc_shm_on()) {
        why = "no whole page in the range";
        if (gc_ivshmem_uncached()) why = "the ivshmem mapping is uncached in this VM: the program's own use of the pages would slow down";
        else if (hi > lo && (why = gc_shm_adopt(lo, (size_t)(hi - lo), &r.off, &r.held)) == NULL) {
            r.zc = lo;
            r.zc_n = (size_t)(hi - lo);
        }
    }
    regs[nregs++] = r;
    pthread_mutex_unlock(&gc.mu);
    if (!r.zc_n && gc_shm_on() && getenv("GPUCLOUD_DEBUG"))
        fprintf(stderr, "gpucloud: cuMemHostRegister %p+%zu: not zero-copy (%s); its copies are staged\n", p, n, why);
    if (gc_trace_on()) {
        if (r.zc_n) gc_trace("cuMemHostRegister %p+%zu flags %#x: zero-copy %p+%zu at arena offset %llu, writes %s", p, n, flags,
                             (void *)r.zc, r.zc_n, (unsigned long long)r.off, r.held ? "held" : "not held");
        else gc_trace("cuMemHostRegister %p+%zu flags %#x: staged (%s)", p, n, flags, why);
    }
    return CUDA_SUCCESS;
}

int gc_hostreg_moved(void *p) {
    pthread_mutex_lock(&gc.mu);
    size_t i = find(p);
    int moved = i < nregs && regs[i].zc_n;
    pthread_mutex_unlock(&gc.mu);
    return moved;
}

CUresult gc_hostreg_unregister(void *p) {
    pthread_mutex_lock(&gc.mu);
    size_t i = find(p); /* another thread may have unregistered it meanwhile */
    if (i == nregs) {
        pthread_mutex_unlock(&gc.mu);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    struct hostreg r = regs[i];
    if (r.zc_n && gc_shm_release(r.zc, r.zc_n, r.off) != 0) {
        pthread_mutex_unlock(&gc.mu);
        return CUDA_ERROR_OUT_OF_MEMORY; /* still registered, still usable */
    }
    regs[i] = regs[--nregs];
    pthread_mutex_unlock(&gc.mu);
    if (gc_trace_on()) gc_trace("cuMemHostUnregister %p+%zu%s", p, r.n, r.zc_n ? ": pages back to private memory" : "");
    return CUDA_SUCCESS;
}

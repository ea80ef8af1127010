/* What coherence.c shares with its two companions: coh_twin.c (the CPU and a running kernel on
 * one page at once) and coh_pinned.c (plain pinned memory given a device side when a kernel may
 * see it). Not part of the library's interface. */
#ifndef GPUCLOUD_COHERENCE_INT_H
#define GPUCLOUD_COHERENCE_INT_H

#include "driver/coherence.h"
#include "driver/families.h"

/* Per page. TWIN: the device's work still runs and the CPU has a copy of its own, read-write, with
 * a twin (the bytes as fetched) that tells which bytes the CPU changed (coh_twin.c). */
enum { PAGE_DEVICE = 0, PAGE_CLEAN = 1, PAGE_DIRTY = 2, PAGE_TWIN = 3 };
enum { MAX_SEGS = 256, MAX_BUSY = 64 };

/* A byte range of an adopted shadow that is a variable's: [off, off+n) from its addr. */
struct seg {
    size_t off, n;
};

struct coh {
    uintptr_t addr;       /* the program's view: the device address, page aligned */
    size_t len;           /* page-rounded length */
    size_t bytes;         /* as asked */
    CUdeviceptr dev_base; /* the device allocation (or reservation) holding [addr, addr+len) */
    char *lib;            /* the library's view of the same pages */
    unsigned char *state; /* per page */
    size_t host_pages;    /* pages not DEVICE */
    size_t next_fault, window;
    uint64_t waited; /* the epoch whose work a fault last waited for */
    CUcontext ctx;
    CUstream attached; /* CU_MEM_ATTACH_SINGLE's stream; NULL: wait for the context */
    int kind;
    /* Adopted (a module's managed variables): the device memory is not ours to free, and only the
     * segments' bytes are copied either way. */
    int adopted;
    int nsegs;
    struct seg segs[MAX_SEGS];
    /* Plain pinned memory (coh_pinned.c): the device side is a reservation of vlen bytes, backed
     * (phys) only once a kernel may see the memory; until then (lazy) it is ordinary host memory
     * that no other part of coherence sees. */
    int vmm, lazy;
    size_t vlen;
    CUmemGenericAllocationHandle phys;
    /* Concurrent access (coh_twin.c): the twins, the pages in TWIN, the library's own
     * non-blocking stream, and the events whose completion ends the device's work a fault gave
     * up waiting for. */
    char *twin;
    size_t twin_pages;
    CUstream lane;
    CUevent busy[MAX_BUSY];
    int nbusy;
    struct coh *next;
};

extern pthread_mutex_t gc_coh_mu;
extern struct coh *gc_coh_allocs;
extern size_t gc_coh_page;
extern size_t gc_coh_host_pages_total;
extern __thread int gc_coh_busy_thread; /* this thread is doing coherence work */

/* find_locked: the allocation (not lazy) holding [p, p+n) (n 0: p). gc_coh_mu held. */
struct coh *gc_coh_find_locked(uintptr_t p, size_t n);
/* place maps a shadow of len bytes at exactly addr (PROT_READ) and the library's view; 0, or -1
 * with errno (EEXIST: the address is taken here). */
int gc_coh_place(uintptr_t addr, size_t len, char **lib);

/* coh_twin.c. Whether c's memory may be read and written by the CPU while a kernel runs (host
 * memory the device maps: CUDA allows it; managed memory without concurrent access does not). */
int gc_coh_concurrent_kind(const struct coh *c);
/* wait_bounded waits a short while for the work that may use c: 1 if it ended, 0 if it still runs
 * (its events then kept in c->busy). In c's context, gc_coh_mu held. */
int gc_coh_wait_bounded(struct coh *c);
/* twin_locked gives the CPU page i of c while the device's work still runs: fetched through the
 * library's stream, twinned, read-write. */
void gc_coh_twin_locked(struct coh *c, size_t i);
/* end_twins_locked closes c's TWIN pages, pushes the bytes the CPU changed and makes them DEVICE. */
CUresult gc_coh_end_twins_locked(struct coh *c);
/* Whether any page is TWIN (read unlocked). */
extern size_t gc_coh_twin_total;
/* gc_coh_lane: c's own non-blocking stream, made the first time. In c's context. */
CUresult gc_coh_lane(struct coh *c);
/* release_twin frees what concurrent access kept for c (its stream, events, twins). */
void gc_coh_release_twin(struct coh *c);

/* coh_pinned.c: the device side of plain pinned memory. gc_coh_reserve reserves device
 * addresses for len bytes (*vlen: as many as the device's granularity rounds it to);
 * gc_coh_free_device gives c's device side back, whichever it is. In c's context. */
CUresult gc_coh_reserve(size_t len, CUdeviceptr *base, size_t *vlen);
void gc_coh_free_device(struct coh *c);
/* Plain pinned allocations not yet seen by a kernel (read unlocked), added to and removed from
 * the lookup of them under gc_coh_mu. */
extern size_t gc_coh_lazy_total;
CUresult gc_coh_lazy_add_locked(struct coh *c);
void gc_coh_lazy_remove_locked(struct coh *c);

#endif

/* Software coherence for managed memory and mapped host memory where the program and the device
 * share no memory (TCP, or a shared arena that cannot serve): a distributed-shared-memory scheme.
 *
 * Each such allocation is a real device allocation plus a host shadow placed at the device's own
 * address (MAP_FIXED_NOREPLACE), so the one pointer is the program's and the kernel's alike. The
 * shadow is a memfd mapped twice: the program's view, whose page protections track ownership, and
 * the library's view, always writable, through which pages are filled and read (a fetch never
 * opens a page to the program half-written). Per page:
 *   DEVICE  the device's copy is the truth; PROT_NONE. A CPU access faults: the library waits for
 *           the device's work (the stream the memory is attached to, else the context), fetches a
 *           window of pages (widening while the program reads sequentially) and makes them CLEAN.
 *   CLEAN   both copies agree; PROT_READ. A write faults: the page (and its neighbours, 16 pages)
 *           become DIRTY.
 *   DIRTY   the host's copy is the truth; PROT_READ|PROT_WRITE.
 * Before any call that may let the device touch memory (a launch, a copy, a library call: every
 * call but the few listed in touches_no_memory), every host page is closed (PROT_NONE first, so a
 * thread writing meanwhile waits in the fault handler instead of losing its write), the DIRTY
 * pages are pushed to the device, and all pages become DEVICE. These are CUDA's semantics for
 * devices without concurrentManagedAccess, which is what the guest reports over such transports
 * (api_device.c): the CPU may touch managed memory once the device's work on it is done. A CPU
 * that waits for a running kernel (a spin flag in mapped memory) would wait for ever: the fault
 * handler says so after a while (WAIT_WARN_S) so such a hang is named.
 *
 * A module's managed variables (__managed__, .attribute(.managed)) are adopted the same way
 * (gc_coh_adopt): the device memory is the module's, not ours, and shares its pages with the
 * module's other globals, so such a shadow copies only the variables' bytes (its segments) and
 * starts as the device's (the module's initial values are fetched on the first CPU access). */
#define _GNU_SOURCE
#include "guest.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "driver/coherence_int.h"

enum { FETCH_MIN = 16, FETCH_MAX = 4096, DIRTY_CHUNK = 16, PLACE_TRIES = 4, WAIT_WARN_S = 10 };

pthread_mutex_t gc_coh_mu = PTHREAD_MUTEX_INITIALIZER;
struct coh *gc_coh_allocs;
size_t gc_coh_host_pages_total; /* read unlocked by the fast path */
static uint64_t epoch;            /* handings to the device so far: a fault waits once per epoch */
size_t gc_coh_page;
__thread int gc_coh_busy_thread; /* this thread is doing coherence work: its own calls skip the hook */
static struct sigaction prev_segv;
/* What coherence did, printed at exit with GPUCLOUD_COHERENCE_STATS=1 (benchmarks, tuning). */
static struct {
    uint64_t faults, waits, fetches, fetched, pushes, pushed, handings;
} stats;
static int handler_installed;

static void on_fault(int sig, siginfo_t *si, void *uc);

/* An arena (unix:, or a VM's ivshmem channel) mapped a second time at its device address serves
 * managed memory itself; without one coherence does. */
int gc_coh_transport(void) { return !gc_shm_on(); }

struct coh *gc_coh_find_locked(uintptr_t p, size_t n) {
    for (struct coh *c = gc_coh_allocs; c; c = c->next)
        if (!c->lazy && p >= c->addr && p - c->addr < c->len && (n == 0 || n <= c->len - (p - c->addr))) return c;
    return NULL;
}

static void print_stats(void) {
    fprintf(stderr, "gpucloud: coherence: %llu faults, %llu waits for the device, %llu fetches (%llu bytes), "
                    "%llu handings to the device, %llu pushes (%llu bytes)\n",
            (unsigned long long)stats.faults, (unsigned long long)stats.waits, (unsigned long long)stats.fetches,
            (unsigned long long)stats.fetched, (unsigned long long)stats.handings, (unsigned long long)stats.pushes,
            (unsigned long long)stats.pushed);
}

static CUresult install_handler_locked(void) {
    if (handler_installed) return CUDA_SUCCESS;
    const char *st = getenv("GPUCLOUD_COHERENCE_STATS");
    if (st && *st && *st != '0') atexit(print_stats);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    struct sigaction old;
    if (sigaction(SIGSEGV, NULL, &old) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
    if (old.sa_flags & SA_ONSTACK) sa.sa_flags |= SA_ONSTACK; /* a program's stack-overflow handler keeps its stack */
    prev_segv = old;
    if (sigaction(SIGSEGV, &sa, NULL) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
    handler_installed = 1;
    return CUDA_SUCCESS;
}

/* place maps a shadow of len bytes at exactly addr: the program's view (PROT_READ) and the
 * library's; 0, or -1 with errno (EEXIST: the address is taken here). */
int gc_coh_place(uintptr_t addr, size_t len, char **lib) {
    int fd = memfd_create("gpucloud-coherent", MFD_CLOEXEC);
    if (fd < 0) return -1;
    int err = 0;
    void *l = MAP_FAILED, *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) != 0) err = errno;
    if (!err && (l = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) err = errno;
    if (!err) {
        p = mmap((void *)addr, len, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == MAP_FAILED) err = errno;
        else if (p != (void *)addr) { /* a kernel before 4.17 took the address as a hint */
            munmap(p, len);
            err = EEXIST;
        }
    }
    close(fd);
    if (err) {
        if (l != MAP_FAILED) munmap(l, len);
        errno = err;
        return -1;
    }
    *lib = l;
    return 0;
}

static void say_once(int *said, const char *what) {
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED)) fprintf(stderr, "gpucloud: %s\n", what);
}

CUresult gc_coh_alloc(void **out, size_t bytes, int kind) {
    if (!out || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t page = gc_coh_page ? gc_coh_page : (gc_coh_page = (size_t)sysconf(_SC_PAGESIZE));
    if (bytes > SIZE_MAX / 2 - 2 * page) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = (bytes + page - 1) / page * page;
    CUcontext ctx = NULL;
    CUresult rc = cuCtxGetCurrent(&ctx);
    if (rc == CUDA_SUCCESS && !ctx) rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc != CUDA_SUCCESS) return rc;
    struct coh *c = calloc(1, sizeof *c);
    unsigned char *state = calloc(len / page, 1);
    if (!c || !state) {
        free(c), free(state);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* Plain pinned memory gets only a reservation of device addresses now (coh_pinned.c); the
     * rest a device allocation a page larger, so that its first page boundary starts len bytes of
     * it: the shadow needs page-aligned addresses, device allocations come 512-byte aligned. An
     * address taken here is kept aside while the next allocation is tried, then given back. */
    int lazy = kind == GC_COH_PINNED;
    CUdeviceptr taken[PLACE_TRIES], base = 0;
    size_t vlen = 0, taken_vlen[PLACE_TRIES];
    int ntaken = 0, placed = 0;
    gc_coh_busy_thread++;
    while (ntaken < PLACE_TRIES) {
        rc = lazy ? gc_coh_reserve(len, &base, &vlen) : cuMemAlloc_v2(&base, len + page);
        if (rc != CUDA_SUCCESS) break;
        uintptr_t addr = (base + page - 1) / page * page;
        if (gc_coh_place(addr, len, &c->lib) == 0) {
            c->addr = addr;
            placed = 1;
            break;
        }
        int err = errno;
        taken_vlen[ntaken] = vlen;
        taken[ntaken++] = base;
        if (err != EEXIST) {
            rc = err == ENOSYS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_OUT_OF_MEMORY; /* no memfd, or no room */
            break;
        }
    }
    for (int i = 0; i < ntaken; i++) lazy ? (void)cuMemAddressFree(taken[i], taken_vlen[i]) : (void)cuMemFree_v2(taken[i]);
    if (placed && !lazy) rc = cuMemsetD8_v2(c->addr, 0, len); /* the device's copy matches the zeroed shadow */
    gc_coh_busy_thread--;
    c->len = len, c->bytes = bytes, c->dev_base = base, c->state = state, c->ctx = ctx;
    c->kind = lazy ? GC_COH_MAPPED_HOST : kind, c->vmm = c->lazy = lazy, c->vlen = vlen;
    if (!placed || rc != CUDA_SUCCESS) {
        static int said;
        if (placed) {
            munmap((void *)c->addr, len), munmap(c->lib, len);
            gc_coh_busy_thread++, gc_coh_free_device(c), gc_coh_busy_thread--;
        } else if (ntaken == PLACE_TRIES) {
            say_once(&said, "managed or mapped host memory: the device's addresses are taken in this process "
                            "(CUDA_ERROR_NOT_SUPPORTED)");
            rc = CUDA_ERROR_NOT_SUPPORTED;
        }
        free(c), free(state);
        return rc;
    }
    c->window = FETCH_MIN;
    if (lazy) { /* ordinary host memory until a kernel may see it: no page is the device's */
        mprotect((void *)c->addr, len, PROT_READ | PROT_WRITE);
        memset(state, PAGE_DIRTY, len / page);
    } else {
        memset(state, PAGE_CLEAN, len / page);
        c->host_pages = len / page;
    }
    pthread_mutex_lock(&gc_coh_mu);
    rc = install_handler_locked();
    if (rc == CUDA_SUCCESS && lazy) rc = gc_coh_lazy_add_locked(c);
    if (rc == CUDA_SUCCESS) {
        c->next = gc_coh_allocs;
        gc_coh_allocs = c;
        __atomic_add_fetch(&gc_coh_host_pages_total, c->host_pages, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&gc_coh_mu);
    if (rc != CUDA_SUCCESS) {
        munmap((void *)c->addr, len), munmap(c->lib, len);
        gc_coh_busy_thread++, gc_coh_free_device(c), gc_coh_busy_thread--;
        free(c), free(state);
        return rc;
    }
    if (gc_trace_on())
        gc_trace("coherent %s memory: %zu bytes at %#lx", kind == GC_COH_MANAGED ? "managed" : lazy ? "plain pinned" : "mapped host",
                 bytes, (unsigned long)c->addr);
    *out = (void *)c->addr;
    return CUDA_SUCCESS;
}

int gc_coh_free(const void *p, int kind) {
    pthread_mutex_lock(&gc_coh_mu);
    struct coh **pp = &gc_coh_allocs, *c = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->addr == (uintptr_t)p && (*pp)->kind == kind && !(*pp)->adopted) {
            c = *pp;
            *pp = c->next;
            break;
        }
    if (c) {
        __atomic_sub_fetch(&gc_coh_host_pages_total, c->host_pages, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&gc_coh_twin_total, c->twin_pages, __ATOMIC_RELEASE);
        if (c->lazy) gc_coh_lazy_remove_locked(c);
    }
    pthread_mutex_unlock(&gc_coh_mu);
    if (!c) return 0;
    gc_coh_busy_thread++;
    CUcontext was = NULL;
    (void)cuCtxPushCurrent_v2(c->ctx);
    if (!c->lazy) (void)cuCtxSynchronize(); /* as cuMemFree waits for the device's work on it */
    gc_coh_release_twin(c);
    gc_coh_free_device(c);
    (void)cuCtxPopCurrent_v2(&was);
    gc_coh_busy_thread--;
    munmap((void *)c->addr, c->len);
    munmap(c->lib, c->len);
    free(c->state);
    free(c);
    return 1;
}

/* in_segment: whether [off, off+n) (n 0: off) lies in one of an adopted shadow's variables. */
static int in_segment(const struct coh *c, size_t off, size_t n) {
    for (int i = 0; i < c->nsegs; i++)
        if (off >= c->segs[i].off && off - c->segs[i].off < c->segs[i].n && (n == 0 || n <= c->segs[i].n - (off - c->segs[i].off)))
            return 1;
    return 0;
}

int gc_coh_find(const void *p, size_t n, int *kind) {
    /* The library's own copies (pushes and fetches, under mu) name only the library's view. */
    if (gc_coh_busy_thread || !__atomic_load_n(&gc_coh_allocs, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&gc_coh_mu);
    struct coh *c = gc_coh_find_locked((uintptr_t)p, n);
    if (c && c->adopted && !in_segment(c, (uintptr_t)p - c->addr, n)) c = NULL; /* a neighbouring global */
    if (c && kind) *kind = c->kind;
    pthread_mutex_unlock(&gc_coh_mu);
    return c != NULL;
}

CUresult gc_coh_attach(const void *p, CUstream s, unsigned flags) {
    pthread_mutex_lock(&gc_coh_mu);
    struct coh *c = gc_coh_find_locked((uintptr_t)p, 0);
    if (c) c->attached = flags == CU_MEM_ATTACH_SINGLE ? s : NULL;
    pthread_mutex_unlock(&gc_coh_mu);
    return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void gc_coh_prefault(const void *p, size_t n) {
    if (!p || !n || (!gc_coh_find(p, 0, NULL) && !gc_coh_find((const char *)p + n - 1, 0, NULL))) return;
    volatile const char *c = p;
    for (size_t i = 0; i < n; i += gc_coh_page) (void)c[i];
    (void)c[n - 1];
}

/* ---- handing the memory to the device ---- */

/* each_run calls fn on every run [a, b) of pages in state st within [lo, hi), stopping at an error. */
static CUresult each_run(struct coh *c, size_t lo, size_t hi, unsigned char st, CUresult (*fn)(struct coh *, size_t, size_t)) {
    CUresult rc = CUDA_SUCCESS;
    for (size_t a = lo; a < hi && rc == CUDA_SUCCESS;) {
        size_t b = a;
        while (b < hi && c->state[b] == st) b++;
        if (b > a) rc = fn(c, a, b);
        a = b > a ? b : a + 1;
    }
    return rc;
}

/* copy_pages copies pages [a, b) between the library's view and the device (to_device: that
 * way); an adopted shadow only its segments' bytes within them. */
static CUresult copy_pages(struct coh *c, size_t a, size_t b, int to_device) {
    size_t lo = a * gc_coh_page, hi = b * gc_coh_page;
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; rc == CUDA_SUCCESS && i < (c->adopted ? c->nsegs : 1); i++) {
        size_t x = lo, y = hi;
        if (c->adopted) {
            x = c->segs[i].off > lo ? c->segs[i].off : lo;
            y = c->segs[i].off + c->segs[i].n < hi ? c->segs[i].off + c->segs[i].n : hi;
            if (x >= y) continue;
        }
        rc = to_device ? cuMemcpyHtoD_v2(c->addr + x, c->lib + x, y - x) : cuMemcpyDtoH_v2(c->lib + x, c->addr + x, y - x);
    }
    return rc;
}

/* push_run sends DIRTY pages [a, b) to the device from the library's view. Host memory the
 * device maps goes through the library's own stream: a kernel spinning on it in a blocking stream
 * would hold a copy on the legacy stream back for ever (coh_twin.c). */
static CUresult push_run(struct coh *c, size_t a, size_t b) {
    stats.pushes++, stats.pushed += (b - a) * gc_coh_page;
    if (!gc_coh_concurrent_kind(c)) return copy_pages(c, a, b, 1);
    size_t lo = a * gc_coh_page, n = (b - a) * gc_coh_page;
    CUresult rc = gc_coh_lane(c);
    if (rc == CUDA_SUCCESS) rc = cuMemcpyHtoDAsync_v2(c->addr + lo, c->lib + lo, n, c->lane);
    return rc == CUDA_SUCCESS ? cuStreamSynchronize(c->lane) : rc;
}

/* reopen_run gives pages [a, b) back the protection their state says. */
static CUresult reopen_run(struct coh *c, size_t a, size_t b) {
    mprotect((void *)(c->addr + a * gc_coh_page), (b - a) * gc_coh_page, c->state[a] == PAGE_DIRTY ? PROT_READ | PROT_WRITE : PROT_READ);
    return CUDA_SUCCESS;
}

/* Calls that cannot let the device read or write memory: they leave the host's pages as they are. */
static int touches_no_memory(uint16_t type) {
    switch (type) {
    case GW_TYPE_SYNCHRONIZE: case GW_TYPE_STREAM_SYNCHRONIZE: case GW_TYPE_STREAM_QUERY:
    case GW_TYPE_STREAM_CREATE: case GW_TYPE_STREAM_DESTROY: case GW_TYPE_STREAM_WAIT_EVENT:
    case GW_TYPE_EVENT_CREATE: case GW_TYPE_EVENT_DESTROY: case GW_TYPE_EVENT_ELAPSED_TIME:
    case GW_TYPE_EVENT_QUERY: case GW_TYPE_EVENT_RECORD: case GW_TYPE_EVENT_SYNCHRONIZE:
    case GW_TYPE_DEVICE_ATTRIBUTE: case GW_TYPE_DEVICE_INFO: case GW_TYPE_DRIVER_VERSION:
    case GW_TYPE_MEM_GET_INFO: case GW_TYPE_MEM_ALLOC: case GW_TYPE_MEM_FREE: case GW_TYPE_SHM_DEVICE_POINTER:
    case GW_TYPE_MODULE_LOAD: case GW_TYPE_MODULE_UNLOAD: case GW_TYPE_MODULE_GET_FUNCTION:
    case GW_TYPE_MODULE_GET_GLOBAL: case GW_TYPE_MODULE_GET_GLOBAL_MANAGED: case GW_TYPE_FUNC_GET_ATTRIBUTE:
    case GW_TYPE_FUNC_SET_ATTRIBUTE: case GW_TYPE_STREAM_SET_ACCESS_POLICY:
    case GW_TYPE_FUNC_PARAM_LAYOUT: case GW_TYPE_OCCUPANCY_MAX_ACTIVE_BLOCKS:
    case GW_TYPE_CTX_GET_LIMIT: case GW_TYPE_CTX_SET_LIMIT: case GW_TYPE_CTX_GET_CACHE_CONFIG:
    case GW_TYPE_CTX_SET_CACHE_CONFIG: return 1;
    default: return 0;
    }
}

/* hand_locked hands c's host pages to the device: the DIRTY ones pushed, all DEVICE. Caller holds
 * mu and is in coherence. */
static CUresult hand_locked(struct coh *c) {
    CUresult trc = gc_coh_end_twins_locked(c); /* none left TWIN, or the call fails */
    if (trc != CUDA_SUCCESS) return trc;
    if (!c->host_pages) return CUDA_SUCCESS;
    /* Closed first: a thread that writes from now on waits in the fault handler for this. */
    mprotect((void *)c->addr, c->len, PROT_NONE);
    CUcontext was = NULL;
    (void)cuCtxPushCurrent_v2(c->ctx);
    CUresult rc = each_run(c, 0, c->len / gc_coh_page, PAGE_DIRTY, push_run);
    (void)cuCtxPopCurrent_v2(&was);
    if (rc != CUDA_SUCCESS) { /* the host's copy stays the truth, open as it was; the call fails */
        (void)each_run(c, 0, c->len / gc_coh_page, PAGE_CLEAN, reopen_run);
        (void)each_run(c, 0, c->len / gc_coh_page, PAGE_DIRTY, reopen_run);
        return rc;
    }
    memset(c->state, PAGE_DEVICE, c->len / gc_coh_page);
    __atomic_sub_fetch(&gc_coh_host_pages_total, c->host_pages, __ATOMIC_RELEASE);
    c->host_pages = 0;
    c->window = FETCH_MIN;
    return CUDA_SUCCESS;
}

CUresult gc_coh_before(uint16_t type) {
    if (gc_coh_busy_thread) return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    /* Pages the CPU shares with a running kernel (coh_twin.c): whatever the call, the CPU's
     * writes reach the device first (a synchronization must not wait for a kernel that waits for
     * them), and the pages go back to the device. */
    if (__atomic_load_n(&gc_coh_twin_total, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&gc_coh_mu);
        gc_coh_busy_thread++;
        for (struct coh *c = gc_coh_allocs; c; c = c->next) {
            CUresult trc = gc_coh_end_twins_locked(c);
            if (rc == CUDA_SUCCESS) rc = trc;
        }
        gc_coh_busy_thread--;
        pthread_mutex_unlock(&gc_coh_mu);
    }
    if (rc != CUDA_SUCCESS || !__atomic_load_n(&gc_coh_host_pages_total, __ATOMIC_ACQUIRE) || touches_no_memory(type))
        return rc;
    pthread_mutex_lock(&gc_coh_mu);
    gc_coh_busy_thread++;
    epoch++;
    stats.handings++;
    for (struct coh *c = gc_coh_allocs; c; c = c->next) {
        CUresult hrc = hand_locked(c);
        if (rc == CUDA_SUCCESS) rc = hrc;
    }
    gc_coh_busy_thread--;
    pthread_mutex_unlock(&gc_coh_mu);
    return rc;
}

/* ---- the CPU's faults ---- */

/* wait_device waits for the work that may be using c: its stream, else the context. A CPU that
 * waits for a kernel that waits for the CPU would wait for ever: a watchdog names it after
 * WAIT_WARN_S. */
static void warn_waiting(union sigval v) {
    fprintf(stderr, "gpucloud: the CPU touched managed or mapped host memory at %#lx and has waited %d s for the "
                    "device's work to end (software coherence over this transport: no concurrent CPU and GPU access; "
                    "a kernel that waits for the CPU never ends)\n", (unsigned long)v.sival_ptr, WAIT_WARN_S);
}

static void wait_device(struct coh *c) {
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD, .sigev_notify_function = warn_waiting};
    ev.sigev_value.sival_ptr = (void *)c->addr;
    timer_t t;
    int armed = timer_create(CLOCK_MONOTONIC, &ev, &t) == 0;
    struct itimerspec when = {.it_value = {WAIT_WARN_S, 0}};
    if (armed) timer_settime(t, 0, &when, NULL);
    /* A stream that is gone (destroyed since the attachment) leaves the whole context to wait for. */
    if (!c->attached || cuStreamSynchronize(c->attached) != CUDA_SUCCESS) (void)cuCtxSynchronize();
    if (armed) timer_delete(t);
}

/* fetch_run brings DEVICE pages [a, b) into the host (CLEAN); a failure ends the program rather
 * than letting it read a stale page. */
static CUresult fetch_run(struct coh *c, size_t a, size_t b) {
    stats.fetches++, stats.fetched += (b - a) * gc_coh_page;
    CUresult rc = copy_pages(c, a, b, 0);
    if (rc != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(rc, &name);
        fprintf(stderr, "gpucloud: the CPU touched managed or mapped host memory at %#lx, and fetching it from the "
                        "device failed (%s); the program cannot go on\n", (unsigned long)(c->addr + a * gc_coh_page), name);
        abort();
    }
    memset(c->state + a, PAGE_CLEAN, b - a);
    mprotect((void *)(c->addr + a * gc_coh_page), (b - a) * gc_coh_page, PROT_READ);
    c->host_pages += b - a;
    __atomic_add_fetch(&gc_coh_host_pages_total, b - a, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* dirty_run opens CLEAN pages [a, b) for writing. */
static CUresult dirty_run(struct coh *c, size_t a, size_t b) {
    memset(c->state + a, PAGE_DIRTY, b - a);
    mprotect((void *)(c->addr + a * gc_coh_page), (b - a) * gc_coh_page, PROT_READ | PROT_WRITE);
    return CUDA_SUCCESS;
}

/* fetch_locked brings the DEVICE pages of c's fault window around page i into the host: CLEAN. */
static void fetch_locked(struct coh *c, size_t i) {
    CUcontext was = NULL;
    (void)cuCtxPushCurrent_v2(c->ctx);
    if (c->waited != epoch) { /* no work was handed to the device since the last wait */
        /* Mapped host memory waits only a while: a kernel may be waiting for this very access. */
        if (gc_coh_concurrent_kind(c) && !gc_coh_wait_bounded(c)) {
            gc_coh_twin_locked(c, i);
            (void)cuCtxPopCurrent_v2(&was);
            return;
        }
        if (!gc_coh_concurrent_kind(c)) wait_device(c);
        stats.waits++;
        c->waited = epoch;
    }
    size_t n = c->len / gc_coh_page;
    c->window = i == c->next_fault ? (c->window * 2 > FETCH_MAX ? FETCH_MAX : c->window * 2) : FETCH_MIN;
    size_t lo = i / FETCH_MIN * FETCH_MIN, hi = lo + c->window < n ? lo + c->window : n;
    if (i >= hi) hi = i + 1;
    c->next_fault = hi;
    (void)each_run(c, lo, hi, PAGE_DEVICE, fetch_run);
    (void)cuCtxPopCurrent_v2(&was);
}

/* dirty_locked opens the CLEAN pages of a DIRTY_CHUNK around page i for writing. */
static void dirty_locked(struct coh *c, size_t i) {
    size_t n = c->len / gc_coh_page, lo = i / DIRTY_CHUNK * DIRTY_CHUNK, hi = lo + DIRTY_CHUNK < n ? lo + DIRTY_CHUNK : n;
    (void)each_run(c, lo, hi, PAGE_CLEAN, dirty_run);
}

/* holds_connection: whether this thread holds the connection (gc.mu), so that a fault here
 * could not fetch (glibc records a mutex's owner). Where it can't tell, it says no. */
static int holds_connection(void) {
#ifdef __GLIBC__
    return gc.mu.__data.__owner == gettid();
#else
    return 0;
#endif
}

/* fault: whether the fault at p was one of ours (and is resolved: the access is retried). */
static int fault(uintptr_t p) {
    if (!__atomic_load_n(&gc_coh_allocs, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&gc_coh_mu);
    struct coh *c = gc_coh_find_locked(p, 1);
    if (c && holds_connection()) {
        /* The library itself read the program's memory mid-call (kernel parameters or a 2-D copy's
         * rows kept in managed memory): the fetch would wait for the call. Named, not hung. */
        fprintf(stderr, "gpucloud: managed or mapped host memory at %#lx was read by the guest library during a call "
                        "while it was the device's (over this transport such memory cannot hold a call's host-side "
                        "arguments); the program cannot go on\n", (unsigned long)p);
        abort();
    }
    if (c) {
        stats.faults++;
        size_t i = (p - c->addr) / gc_coh_page;
        gc_coh_busy_thread++;
        if (c->state[i] == PAGE_DEVICE) fetch_locked(c, i); /* a write faults again, on the CLEAN page */
        else if (c->state[i] == PAGE_CLEAN) dirty_locked(c, i);
        else if (c->state[i] == PAGE_TWIN) /* closed a moment while its changes were pushed */
            mprotect((void *)(c->addr + i * gc_coh_page), gc_coh_page, PROT_READ | PROT_WRITE);
        gc_coh_busy_thread--; /* DIRTY: another thread opened it meanwhile */
    }
    pthread_mutex_unlock(&gc_coh_mu);
    return c != NULL;
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
    int saved = errno;
    if (fault((uintptr_t)si->si_addr)) {
        errno = saved;
        return;
    }
    errno = saved;
    /* Not ours: the program's own handler, or what the signal did before we came. */
    if (prev_segv.sa_flags & SA_SIGINFO) {
        prev_segv.sa_sigaction(sig, si, uc);
    } else if (prev_segv.sa_handler != SIG_DFL && prev_segv.sa_handler != SIG_IGN) {
        prev_segv.sa_handler(sig);
    } else {
        signal(SIGSEGV, SIG_DFL); /* the access runs again and the default action ends the process */
    }
}

/* ---- a module's managed variables ---- */

/* add_seg_locked adds [p, p+n), clipped to c, to c's segments; c's host pages go to the device
 * first, so that the next CPU access fetches the new variable's bytes with the others'. */
static CUresult add_seg_locked(struct coh *c, uintptr_t p, size_t n) {
    uintptr_t x = p > c->addr ? p : c->addr, y = p + n < c->addr + c->len ? p + n : c->addr + c->len;
    struct seg s = {x - c->addr, y - x};
    for (int i = 0; i < c->nsegs; i++)
        if (c->segs[i].off == s.off && c->segs[i].n == s.n) return CUDA_SUCCESS; /* adopted before */
    if (c->nsegs == MAX_SEGS) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = hand_locked(c);
    if (rc == CUDA_SUCCESS) c->segs[c->nsegs++] = s;
    return rc;
}

/* adopt_run_locked places a shadow over pages [a, a+len) that no shadow covers, the device's
 * (PROT_NONE), holding the part of [p, p+n) within them. */
static CUresult adopt_run_locked(uintptr_t a, size_t len, CUcontext ctx, uintptr_t p, size_t n) {
    struct coh *c = calloc(1, sizeof *c);
    unsigned char *state = calloc(len / gc_coh_page, 1); /* PAGE_DEVICE */
    if (!c || !state) {
        free(c), free(state);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (gc_coh_place(a, len, &c->lib) != 0) {
        int err = errno;
        free(c), free(state);
        return err == EEXIST || err == ENOSYS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    mprotect((void *)a, len, PROT_NONE);
    c->addr = a, c->len = len, c->bytes = len, c->state = state, c->ctx = ctx, c->kind = GC_COH_MANAGED;
    c->adopted = 1, c->window = FETCH_MIN;
    (void)add_seg_locked(c, p, n); /* no host pages to hand over: cannot fail */
    c->next = gc_coh_allocs;
    __atomic_store_n(&gc_coh_allocs, c, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult gc_coh_adopt(CUdeviceptr dp, size_t n) {
    if (!dp || !n) return CUDA_ERROR_INVALID_VALUE;
    if (!gc_coh_page) gc_coh_page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t p = (uintptr_t)dp, lo = p / gc_coh_page * gc_coh_page, hi = (p + n + gc_coh_page - 1) / gc_coh_page * gc_coh_page;
    CUcontext ctx = NULL;
    CUresult rc = cuCtxGetCurrent(&ctx);
    if (rc == CUDA_SUCCESS && !ctx) rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&gc_coh_mu);
    gc_coh_busy_thread++;
    rc = install_handler_locked();
    for (uintptr_t a = lo; rc == CUDA_SUCCESS && a < hi;) {
        struct coh *c = gc_coh_find_locked(a, 1);
        if (c) { /* a neighbour adopted the page already (another variable of the module) */
            rc = c->adopted ? add_seg_locked(c, p, n) : CUDA_ERROR_INVALID_VALUE;
            a = c->addr + c->len;
            continue;
        }
        uintptr_t b = a + gc_coh_page;
        while (b < hi && !gc_coh_find_locked(b, 1)) b += gc_coh_page;
        rc = adopt_run_locked(a, b - a, ctx, p, n);
        a = b;
    }
    gc_coh_busy_thread--;
    pthread_mutex_unlock(&gc_coh_mu);
    if (rc != CUDA_SUCCESS) gc_coh_disown(dp, n); /* the pages adopted before the failure */
    if (rc == CUDA_SUCCESS && gc_trace_on()) gc_trace("managed variable: %zu bytes at %#lx", n, (unsigned long)p);
    return rc;
}

void gc_coh_disown(CUdeviceptr dp, size_t n) {
    uintptr_t p = (uintptr_t)dp;
    pthread_mutex_lock(&gc_coh_mu);
    for (struct coh **pp = &gc_coh_allocs; *pp;) {
        struct coh *c = *pp;
        if (c->adopted && p < c->addr + c->len && p + n > c->addr) {
            uintptr_t x = p > c->addr ? p : c->addr;
            for (int i = 0; i < c->nsegs; i++)
                if (c->segs[i].off == x - c->addr) c->segs[i--] = c->segs[--c->nsegs];
            if (c->nsegs == 0) {
                *pp = c->next;
                __atomic_sub_fetch(&gc_coh_host_pages_total, c->host_pages, __ATOMIC_RELEASE);
                munmap((void *)c->addr, c->len), munmap(c->lib, c->len);
                free(c->state), free(c);
                continue;
            }
        }
        pp = &c->next;
    }
    pthread_mutex_unlock(&gc_coh_mu);
}

/* The CPU and a running kernel on the same page of mapped host memory (coherence.c's pages are
 * otherwise the CPU's or the device's, never both). CUDA lets the CPU read and write pinned host
 * memory while a kernel uses it, and programs rely on it: a kernel spins on a latch until the CPU
 * sets it (UnifiedMemoryPerf), or until a timeout (p2pBandwidthLatencyTest). Waiting for such a
 * kernel before serving the CPU's access never ends. So, as multiple-writer distributed shared
 * memory does (TreadMarks, Munin):
 *   - A CPU access to a DEVICE page of mapped host memory waits only a short while
 *     (GPUCLOUD_COHERENCE_CONCURRENT_MS, default 10) for the device's work; if it still runs, the
 *     page is fetched through the library's own non-blocking stream (which does not wait behind
 *     the kernel; the worker runs a call while a kernel runs, it waits only in synchronizations),
 *     a twin of it kept, and the page opened read-write: TWIN.
 *   - The bytes the CPU changed (the page against its twin, byte by byte) go to the device on that
 *     stream: before the program's next call of any kind, and every FLUSH_US from a thread of the
 *     library meanwhile. Only changed bytes travel, so the kernel's own writes to the page's other
 *     bytes are kept. The same thread refreshes the CPU's copy from the device after each push, so
 *     a CPU read of a TWIN page sees the device's bytes as of at most a few milliseconds ago.
 *   - The program's next call ends TWIN pages (pushed, then DEVICE: the next access fetches
 *     afresh); once the work the fault gave up on has ended, the thread's last refresh makes them
 *     CLEAN. Managed memory keeps CUDA's rule for devices without concurrent managed access (the
 *     CPU waits). */
#define _GNU_SOURCE
#include "guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "driver/coherence_int.h"

enum { FLUSH_US = 2000, MAX_STREAMS = 1024, DEFAULT_CONCURRENT_MS = 10 };

size_t gc_coh_twin_total;
static int flusher_running; /* under gc_coh_mu */

/* ---- the non-blocking streams, whose work the legacy stream does not wait for ---- */

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static CUstream streams[MAX_STREAMS];
static int nstreams;

void gc_coh_stream_created(CUstream s, unsigned flags) {
    if (!(flags & CU_STREAM_NON_BLOCKING)) return;
    pthread_mutex_lock(&streams_mu);
    if (nstreams < MAX_STREAMS) streams[nstreams++] = s; /* past that, a fault may end waiting early */
    pthread_mutex_unlock(&streams_mu);
}

void gc_coh_stream_destroyed(CUstream s) {
    pthread_mutex_lock(&streams_mu);
    for (int i = 0; i < nstreams; i++)
        if (streams[i] == s) streams[i--] = streams[--nstreams];
    pthread_mutex_unlock(&streams_mu);
}

int gc_coh_concurrent_kind(const struct coh *c) { return c->kind == GC_COH_MAPPED_HOST; }

/* ---- waiting a short while ---- */

static long concurrent_after_ns(void) {
    static long ns = -1;
    if (ns < 0) {
        const char *e = getenv("GPUCLOUD_COHERENCE_CONCURRENT_MS");
        long ms = e && *e ? strtol(e, NULL, 10) : DEFAULT_CONCURRENT_MS;
        ns = (ms < 0 ? 0 : ms > 600000 ? 600000 : ms) * 1000000L;
    }
    return ns;
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* busy_done: whether every event in c->busy has completed (then they are dropped). */
static int busy_done(struct coh *c) {
    for (int i = 0; i < c->nbusy; i++)
        if (cuEventQuery(c->busy[i]) == CUDA_ERROR_NOT_READY) return 0;
    for (int i = 0; i < c->nbusy; i++) (void)cuEventDestroy_v2(c->busy[i]);
    c->nbusy = 0;
    return 1;
}

/* record_on adds an event recorded on s to c->busy. */
static void record_on(struct coh *c, CUstream s) {
    CUevent e;
    if (c->nbusy == MAX_BUSY || cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
    if (cuEventRecord(e, s) == CUDA_SUCCESS) c->busy[c->nbusy++] = e;
    else (void)cuEventDestroy_v2(e); /* another context's stream */
}

int gc_coh_wait_bounded(struct coh *c) {
    if (c->nbusy && !busy_done(c)) return 0; /* the work given up on before still runs */
    /* The work that may use c: its stream, else the legacy stream (which follows every blocking
     * stream) and each non-blocking one. */
    if (c->attached) record_on(c, c->attached);
    else {
        record_on(c, NULL);
        pthread_mutex_lock(&streams_mu);
        for (int i = 0; i < nstreams; i++)
            if (streams[i] != c->lane) record_on(c, streams[i]);
        pthread_mutex_unlock(&streams_mu);
    }
    long end = now_ns() + concurrent_after_ns(), pause = 50000;
    while (!busy_done(c)) {
        if (now_ns() >= end) return 0;
        struct timespec ts = {0, pause};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 1000000 ? 1000000 : pause * 2;
    }
    return 1;
}

/* ---- TWIN pages ---- */

static void *flusher(void *arg);

static void die(struct coh *c, size_t off, const char *what, CUresult rc) {
    const char *name = "?";
    cuGetErrorName(rc, &name);
    fprintf(stderr, "gpucloud: mapped host memory at %#lx, touched while a kernel runs: %s failed (%s); the program "
                    "cannot go on\n", (unsigned long)(c->addr + off), what, name);
    abort();
}

CUresult gc_coh_lane(struct coh *c) { return c->lane ? CUDA_SUCCESS : cuStreamCreate(&c->lane, CU_STREAM_NON_BLOCKING); }

void gc_coh_twin_locked(struct coh *c, size_t i) {
    size_t pg = gc_coh_page, off = i * pg;
    CUresult rc = gc_coh_lane(c);
    if (rc == CUDA_SUCCESS && !c->twin) {
        void *t = mmap(NULL, c->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t == MAP_FAILED) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else c->twin = t;
    }
    if (rc == CUDA_SUCCESS) rc = cuMemcpyDtoHAsync_v2(c->lib + off, c->addr + off, pg, c->lane);
    if (rc != CUDA_SUCCESS) die(c, off, "fetching the page", rc);
    memcpy(c->twin + off, c->lib + off, pg);
    c->state[i] = PAGE_TWIN;
    c->twin_pages++;
    __atomic_add_fetch(&gc_coh_twin_total, 1, __ATOMIC_RELEASE);
    mprotect((void *)(c->addr + off), pg, PROT_READ | PROT_WRITE);
    if (gc_trace_on()) gc_trace("mapped host memory at %#lx: the CPU's own copy while the device's work runs", (unsigned long)(c->addr + off));
    if (!flusher_running) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, flusher, NULL) == 0) flusher_running = 1;
        pthread_attr_destroy(&at);
    }
}

/* push_diffs sends the bytes of TWIN page i that differ from its twin, each run of them, and
 * makes the twin match. The copies are queued on c's stream. */
static CUresult push_diffs(struct coh *c, size_t i) {
    size_t pg = gc_coh_page, lo = i * pg, hi = lo + pg;
    CUresult rc = CUDA_SUCCESS;
    for (size_t x = lo; x < hi && rc == CUDA_SUCCESS;) {
        if (c->lib[x] == c->twin[x]) {
            x++;
            continue;
        }
        size_t y = x;
        while (y < hi && c->lib[y] != c->twin[y]) y++;
        memcpy(c->twin + x, c->lib + x, y - x);
        rc = cuMemcpyHtoDAsync_v2(c->addr + x, c->twin + x, y - x, c->lane);
        x = y;
    }
    return rc;
}

/* each_twin_run calls fn on each run [a, b) of TWIN pages. */
static CUresult each_twin_run(struct coh *c, CUresult (*fn)(struct coh *, size_t, size_t, int), int arg) {
    size_t n = c->len / gc_coh_page;
    CUresult rc = CUDA_SUCCESS;
    for (size_t a = 0; a < n && rc == CUDA_SUCCESS;) {
        size_t b = a;
        while (b < n && c->state[b] == PAGE_TWIN) b++;
        if (b > a) rc = fn(c, a, b, arg);
        a = b > a ? b : a + 1;
    }
    return rc;
}

/* flush_run pushes the CPU's changes to TWIN pages [a, b), closed to writes meanwhile (a writing
 * thread waits in the fault handler), then, refresh: reads the device's copy back into them and
 * their twins; prot: the protection they get after. */
static CUresult flush_run(struct coh *c, size_t a, size_t b, int refresh, int prot) {
    size_t pg = gc_coh_page;
    mprotect((void *)(c->addr + a * pg), (b - a) * pg, prot == PROT_NONE ? PROT_NONE : PROT_READ);
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = a; i < b && rc == CUDA_SUCCESS; i++) rc = push_diffs(c, i);
    if (rc == CUDA_SUCCESS && refresh) rc = cuMemcpyDtoHAsync_v2(c->lib + a * pg, c->addr + a * pg, (b - a) * pg, c->lane);
    if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(c->lane);
    if (rc == CUDA_SUCCESS && refresh) memcpy(c->twin + a * pg, c->lib + a * pg, (b - a) * pg);
    mprotect((void *)(c->addr + a * pg), (b - a) * pg, rc == CUDA_SUCCESS ? prot : PROT_READ | PROT_WRITE);
    return rc;
}

static CUresult refresh_run(struct coh *c, size_t a, size_t b, int ended) {
    CUresult rc = flush_run(c, a, b, 1, ended ? PROT_READ : PROT_READ | PROT_WRITE);
    if (rc == CUDA_SUCCESS && ended) { /* the device's work is over: both copies agree */
        memset(c->state + a, PAGE_CLEAN, b - a);
        c->twin_pages -= b - a, c->host_pages += b - a;
        __atomic_sub_fetch(&gc_coh_twin_total, b - a, __ATOMIC_RELEASE);
        __atomic_add_fetch(&gc_coh_host_pages_total, b - a, __ATOMIC_RELEASE);
    }
    return rc;
}

static CUresult end_run(struct coh *c, size_t a, size_t b, int unused) {
    (void)unused;
    CUresult rc = flush_run(c, a, b, 0, PROT_NONE);
    if (rc == CUDA_SUCCESS) {
        memset(c->state + a, PAGE_DEVICE, b - a);
        c->twin_pages -= b - a;
        __atomic_sub_fetch(&gc_coh_twin_total, b - a, __ATOMIC_RELEASE);
    }
    return rc;
}

CUresult gc_coh_end_twins_locked(struct coh *c) {
    if (!c->twin_pages) return CUDA_SUCCESS;
    CUcontext was = NULL;
    (void)cuCtxPushCurrent_v2(c->ctx);
    CUresult rc = each_twin_run(c, end_run, 0);
    (void)cuCtxPopCurrent_v2(&was);
    return rc;
}

/* gc_mu_busy: whether a call holds the connection now (a synchronization waiting for the very
 * kernel, perhaps): the flusher then skips its turn rather than hold gc_coh_mu behind it. */
static int gc_mu_busy(void) {
    if (pthread_mutex_trylock(&gc.mu) != 0) return 1;
    pthread_mutex_unlock(&gc.mu);
    return 0;
}

static void *flusher(void *arg) {
    (void)arg;
    gc_coh_busy_thread = 1; /* its own calls are coherence's */
    for (;;) {
        struct timespec ts = {0, FLUSH_US * 1000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gc_coh_mu);
        if (!__atomic_load_n(&gc_coh_twin_total, __ATOMIC_ACQUIRE)) {
            flusher_running = 0;
            pthread_mutex_unlock(&gc_coh_mu);
            return NULL;
        }
        if (!gc_mu_busy()) {
            for (struct coh *c = gc_coh_allocs; c; c = c->next) {
                if (!c->twin_pages) continue;
                CUcontext was = NULL;
                (void)cuCtxPushCurrent_v2(c->ctx);
                int ended = busy_done(c); /* asked before the refresh, so that it shows the end */
                CUresult rc = each_twin_run(c, refresh_run, ended);
                (void)cuCtxPopCurrent_v2(&was);
                if (rc != CUDA_SUCCESS) die(c, 0, "pushing the CPU's writes", rc);
            }
        }
        pthread_mutex_unlock(&gc_coh_mu);
    }
}

void gc_coh_release_twin(struct coh *c) {
    for (int i = 0; i < c->nbusy; i++) (void)cuEventDestroy_v2(c->busy[i]);
    c->nbusy = 0;
    if (c->lane) (void)cuStreamDestroy_v2(c->lane);
    if (c->twin) munmap(c->twin, c->len);
}

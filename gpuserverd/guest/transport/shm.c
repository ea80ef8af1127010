/* Shared memory with gpuserverd on this host (GPUCLOUD_ENDPOINT=unix:/path): after the handshake
 * the worker creates an arena, registers it with the driver as pinned memory and passes its
 * descriptor over the socket (SCM_RIGHTS); this library maps it. Copies then name a range of the
 * arena and the device DMAs straight from or to it:
 *   - cuMemAllocHost/cuMemHostAlloc hand out arena memory, so a copy from or to it is one DMA;
 *   - any other (pageable) buffer is staged through SHM_SLOTS chunks after the rings, with
 *     several in flight: this thread fills chunk i+1 while the device copies chunk i.
 * After the arena opens, the frames themselves (the same as over TCP) travel through two byte rings
 * at its start, each side spinning briefly and then sleeping on a futex: a small call's round
 * trip makes no system call. The socket stays open only to tell either side the other has gone. */
#define _GNU_SOURCE /* mremap */
#include "transport.h"
#include "maps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define SHM_DEFAULT_MIB 256
#define SHM_SLOTS 4
#define SHM_SLOT_MAX (8u << 20)
#define SHM_ALIGN 4096

struct block {
    size_t off, size;
    int used;
};

static struct {
    char *base;
    size_t size;
    size_t slot;     /* staging chunk size; SHM_SLOTS of them from offset 0 */
    size_t heap_off; /* pinned allocations come from [heap_off, size) */
    pthread_mutex_t mu;
    struct block *blocks;
    size_t nblocks, cblocks;
    int fd;         /* the arena's descriptor, kept to map its blocks over registered ranges */
    off_t fd_off;   /* where the arena starts in it (a slot of an ivshmem channel) */
    uint64_t device_address; /* the arena's device address as the worker told it (0: unknown) */
} shm = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

int gc_shm_on(void) { return shm.base != NULL; }

/* recv_reply_fd reads one frame from the socket, taking the descriptor passed with its first
 * byte into *fd (-1 when none came). */
static CUresult recv_reply_fd(struct gc_reply *r, int *fd) {
    uint8_t h[GW_HEADER_SIZE];
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {h, sizeof h};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    *fd = -1;
    ssize_t got = recvmsg(gc.fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int *fds = (int *)CMSG_DATA(c);
            size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                if (*fd < 0) *fd = fds[i];
                else close(fds[i]);
            }
        }
    if (got != (ssize_t)sizeof h) {
        if (*fd >= 0) close(*fd);
        return gc_transport_error("reading the ShmOpen reply");
    }
    uint32_t len = gw_u32_at(h, 0);
    r->type = h[4] | h[5] << 8;
    if (len > 4096) return gc_transport_error("ShmOpen reply over its size limit");
    static uint8_t p[4096];
    if (gc_read_full(p, len) != 0) return gc_transport_error("reading the ShmOpen reply");
    r->p = p;
    r->n = len;
    return CUDA_SUCCESS;
}

/* ask_arena sends ShmOpen{bytes, address} and reads the reply and the descriptor passed with it. */
static CUresult ask_arena(uint64_t bytes, uint64_t address, struct gw_shm_open_reply *sr, int *fd) {
    struct gw_shm_open m = {.bytes = bytes, .address = address};
    uint8_t b[24];
    size_t n = gw_shm_open_size(&m);
    gw_shm_open_encode(&m, b);
    struct gc_reply r = {0};
    char err[128];
    *fd = -1;
    pthread_mutex_lock(&gc.mu);
    CUresult rc = gc_xfer_locked(GW_TYPE_SHM_OPEN, 0, b, n, NULL, 0, 0, NULL);
    if (rc == CUDA_SUCCESS) rc = recv_reply_fd(&r, fd);
    if (rc == CUDA_SUCCESS && (r.type != GW_TYPE_SHM_OPEN_REPLY || gw_shm_open_reply_decode(sr, r.p, r.n, err, sizeof err) != 0))
        rc = gc_transport_error("malformed ShmOpen reply");
    pthread_mutex_unlock(&gc.mu);
    if (rc != CUDA_SUCCESS && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

/* place_arena maps the arena at its device address when it can: in the room reserved for it (the
 * worker mapped its side there and the driver maps registered memory at its host address), else
 * at the device address if free here, else anywhere. Then a pinned pointer is the program's and
 * the device's alike, as unified addressing promises: a program may pass a cudaMallocHost pointer
 * to a kernel, and some do (a flag a kernel spins on). */
static void *place_arena(void *room, uint64_t bytes, uint64_t device_address, int fd) {
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED | MAP_POPULATE;
    if (device_address && room != MAP_FAILED && device_address == (uint64_t)(uintptr_t)room)
        return mmap(room, bytes, prot, flags | MAP_FIXED, fd, 0); /* replaces our own reservation */
    if (device_address) {
        void *p = mmap((void *)(uintptr_t)device_address, bytes, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
        if (p != MAP_FAILED && p == (void *)(uintptr_t)device_address) return p;
        if (p != MAP_FAILED) munmap(p, bytes); /* an old kernel took the address as a hint */
    }
    return mmap(NULL, bytes, prot, flags, fd, 0);
}

/* gc_open_shm asks for the arena (GPUCLOUD_SHM_MIB, default 256; 0: none) and maps it. Returns 1
 * when shared memory is in use. Runs once after the handshake, on a Unix-socket connection.
 * A request over the server's arena limits is refused with out of memory and the largest arena
 * it would grant now: the library says so and takes that one (at most twice: first the
 * per-session limit, then the server's total may cut it); with none it stays on the
 * socket. */
int gc_open_shm(void) {
    const char *v = getenv("GPUCLOUD_SHM_MIB");
    long mib = v && *v ? atol(v) : SHM_DEFAULT_MIB;
    if (mib <= 0) return 0;
    uint64_t want = (uint64_t)mib << 20;
    struct gw_shm_open_reply sr = {0};
    int fd = -1;
    void *room = MAP_FAILED;
    for (int attempt = 0;; attempt++) {
        /* Room for the arena here, which the worker maps its side at if it can (see place_arena). */
        room = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        uint64_t at = room == MAP_FAILED ? 0 : (uint64_t)(uintptr_t)room;
        if (ask_arena(want, at, &sr, &fd) != CUDA_SUCCESS) {
            if (room != MAP_FAILED) munmap(room, want);
            return 0;
        }
        if (sr.result == 0 && fd >= 0) break;
        if (room != MAP_FAILED) munmap(room, want);
        if (fd >= 0) close(fd);
        if (sr.result == CUDA_ERROR_OUT_OF_MEMORY && attempt < 2 && sr.bytes >= GW_SHM_MIN && sr.bytes < want) {
            fprintf(stderr, "gpucloud: shared arena of %llu MiB refused (%.*s); taking %llu MiB\n",
                    (unsigned long long)(want >> 20), (int)sr.message_len, sr.message, (unsigned long long)(sr.bytes >> 20));
            want = sr.bytes;
            continue;
        }
        fprintf(stderr, "gpucloud: no shared memory (%d): %.*s\n", sr.result, (int)sr.message_len, sr.message);
        return 0;
    }
    void *p = sr.bytes == want ? place_arena(room, want, sr.device_address, fd) : MAP_FAILED;
    if (room != MAP_FAILED && p != room) munmap(room, want);
    if (p == MAP_FAILED || sr.bytes != want) {
        fprintf(stderr, "gpucloud: cannot map the shared arena of %llu bytes\n", (unsigned long long)sr.bytes);
        if (p != MAP_FAILED) munmap(p, sr.bytes);
        close(fd);
        return 0;
    }
    if (gc_shm_attach(p, sr.bytes) != 0) {
        munmap(p, sr.bytes);
        close(fd);
        return 0;
    }
    if (sr.device_address == (uint64_t)(uintptr_t)p) shm.device_address = sr.device_address;
    gc_shm_map_from(fd, 0); /* registered ranges map arena blocks from it */
    gc_rings_start(p, NULL); /* from here on, every frame goes through the rings */
    return 1;
}

void gc_shm_map_from(int fd, off_t off) {
    shm.fd = fd;
    shm.fd_off = off;
}

/* gc_shm_attach lays the staging chunks and the pinned heap over a mapped arena of size bytes (a
 * memfd from ShmOpen, or a VM's ivshmem region); the rings are the caller's. 0, or -1 without memory. */
int gc_shm_attach(char *p, size_t size) {
    shm.size = size;
    shm.slot = (shm.size - GW_SHM_CTL) / 4 / SHM_SLOTS;
    if (shm.slot > SHM_SLOT_MAX) shm.slot = SHM_SLOT_MAX;
    shm.slot &= ~(size_t)(SHM_ALIGN - 1);
    shm.heap_off = GW_SHM_CTL + shm.slot * SHM_SLOTS;
    shm.blocks = malloc(16 * sizeof *shm.blocks);
    if (!shm.blocks) return -1;
    shm.cblocks = 16;
    shm.blocks[0] = (struct block){shm.heap_off, shm.size - shm.heap_off, 0};
    shm.nblocks = 1;
    shm.base = p;
    if (gc_trace_on()) gc_trace("shared arena: %zu bytes, %d staging chunks of %zu", shm.size, SHM_SLOTS, shm.slot);
    return 0;
}

/* ---- pinned allocations: first fit over a sorted block list ---- */

void *gc_shm_alloc(size_t n) {
    if (!shm.base || n == 0) return NULL;
    n = (n + SHM_ALIGN - 1) & ~(size_t)(SHM_ALIGN - 1);
    void *out = NULL;
    pthread_mutex_lock(&shm.mu);
    for (size_t i = 0; i < shm.nblocks; i++) {
        struct block *bl = &shm.blocks[i];
        if (bl->used || bl->size < n) continue;
        if (bl->size > n) { /* split: the rest stays free after this block */
            if (shm.nblocks == shm.cblocks) {
                struct block *nb = realloc(shm.blocks, 2 * shm.cblocks * sizeof *nb);
                if (!nb) break;
                shm.blocks = nb;
                shm.cblocks *= 2;
                bl = &shm.blocks[i];
            }
            memmove(&shm.blocks[i + 2], &shm.blocks[i + 1], (shm.nblocks - i - 1) * sizeof *bl);
            shm.blocks[i + 1] = (struct block){bl->off + n, bl->size - n, 0};
            shm.nblocks++;
            bl->size = n;
        }
        bl->used = 1;
        out = shm.base + bl->off;
        break;
    }
    pthread_mutex_unlock(&shm.mu);
    return out;
}

/* gc_shm_free returns 1 when p was an arena allocation (now free), 0 when it was not ours. */
int gc_shm_free(void *p) {
    if (!shm.base || (char *)p < shm.base || (char *)p >= shm.base + shm.size) return 0;
    size_t off = (size_t)((char *)p - shm.base);
    pthread_mutex_lock(&shm.mu);
    for (size_t i = 0; i < shm.nblocks; i++) {
        if (shm.blocks[i].off != off || !shm.blocks[i].used) continue;
        shm.blocks[i].used = 0;
        if (i + 1 < shm.nblocks && !shm.blocks[i + 1].used) { /* merge with the next */
            shm.blocks[i].size += shm.blocks[i + 1].size;
            memmove(&shm.blocks[i + 1], &shm.blocks[i + 2], (shm.nblocks - i - 2) * sizeof shm.blocks[0]);
            shm.nblocks--;
        }
        if (i > 0 && !shm.blocks[i - 1].used) { /* and with the previous */
            shm.blocks[i - 1].size += shm.blocks[i].size;
            memmove(&shm.blocks[i], &shm.blocks[i + 1], (shm.nblocks - i - 1) * sizeof shm.blocks[0]);
            shm.nblocks--;
        }
        break;
    }
    pthread_mutex_unlock(&shm.mu);
    return 1;
}

/* arena_span tells whether host memory at p is arena memory: an allocation, or a registered
 * range whose pages were moved into the arena (hostreg.c). If so, *off is its arena offset and
 * *len how many of the n bytes from p lie there contiguously; if not, *len is how many bytes from
 * p are ordinary memory before the next arena memory. */
static int arena_span(const char *p, size_t n, uint64_t *off, size_t *len) {
    const char *lo = shm.base + shm.heap_off, *hi = shm.base + shm.size;
    if (p >= lo && p < hi) {
        *off = (uint64_t)(p - shm.base);
        *len = n < (size_t)(hi - p) ? n : (size_t)(hi - p);
        return 1;
    }
    if (gc_hostreg_span(p, n, off, len)) return 1;
    if (lo > p && (size_t)(lo - p) < *len) *len = (size_t)(lo - p);
    return 0;
}

/* ---- parallel memcpy ----
 * One thread's memcpy (about 10 GB/s on the GPU host) is the limit of a staged pageable copy:
 * the DMA out of the arena is five times faster. A staging chunk is therefore copied by
 * PCOPY_WAYS threads at once: the caller and PCOPY_WAYS-1 helpers started on first use. */
#define PCOPY_WAYS 4
#define PCOPY_MIN (1u << 20)

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    char *dst;
    const char *src;
    size_t n, part;
    unsigned gen;
    int pending, helpers;
} pc = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static pthread_once_t pc_once = PTHREAD_ONCE_INIT;

static void part_copy(char *dst, const char *src, size_t n, size_t part, int i) {
    size_t lo = (size_t)i * part;
    if (lo >= n) return;
    size_t hi = lo + part < n ? lo + part : n;
    memcpy(dst + lo, src + lo, hi - lo);
}

static void *pc_helper(void *arg) {
    int idx = (int)(intptr_t)arg;
    unsigned seen = 0;
    pthread_mutex_lock(&pc.mu);
    for (;;) {
        while (pc.gen == seen) pthread_cond_wait(&pc.go, &pc.mu);
        seen = pc.gen;
        char *dst = pc.dst;
        const char *src = pc.src;
        size_t n = pc.n, part = pc.part;
        pthread_mutex_unlock(&pc.mu);
        part_copy(dst, src, n, part, idx);
        pthread_mutex_lock(&pc.mu);
        if (--pc.pending == 0) pthread_cond_signal(&pc.done);
    }
    return NULL;
}

static void pc_start(void) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    for (int i = 1; i < PCOPY_WAYS; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, pc_helper, (void *)(intptr_t)i) == 0) pc.helpers++;
        else break;
    }
    pthread_attr_destroy(&a);
}

/* pcopy is memcpy, split over the helpers for large n. Callers hold gc.mu: one at a time. */
static void pcopy(void *dst, const void *src, size_t n) {
    if (n < 2 * PCOPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    pthread_once(&pc_once, pc_start);
    if (pc.helpers != PCOPY_WAYS - 1) {
        memcpy(dst, src, n);
        return;
    }
    size_t part = ((n + PCOPY_WAYS - 1) / PCOPY_WAYS + 63) & ~(size_t)63;
    pthread_mutex_lock(&pc.mu);
    pc.dst = dst;
    pc.src = src;
    pc.n = n;
    pc.part = part;
    pc.pending = PCOPY_WAYS - 1;
    pc.gen++;
    pthread_cond_broadcast(&pc.go);
    pthread_mutex_unlock(&pc.mu);
    part_copy(dst, src, n, part, 0);
    pthread_mutex_lock(&pc.mu);
    while (pc.pending) pthread_cond_wait(&pc.done, &pc.mu);
    pthread_mutex_unlock(&pc.mu);
}

/* ---- copies ---- */

static CUresult send_copy_locked(uint16_t type, uint64_t dev, uint64_t off, size_t n, uint64_t stream, int async, uint16_t flags) {
    uint8_t b[64];
    size_t bn;
    if (type == GW_TYPE_MEMCPY_HTO_D_SHM) {
        struct gw_memcpy_hto_d_shm m = {.dst = dev, .offset = off, .bytes = n, .stream = stream, .async = (uint32_t)async};
        bn = gw_memcpy_hto_d_shm_size(&m);
        gw_memcpy_hto_d_shm_encode(&m, b);
    } else {
        struct gw_memcpy_dto_h_shm m = {.src = dev, .offset = off, .bytes = n, .stream = stream, .async = (uint32_t)async};
        bn = gw_memcpy_dto_h_shm_size(&m);
        gw_memcpy_dto_h_shm_encode(&m, b);
    }
    return gc_xfer_locked(type, flags, b, bn, NULL, 0, 0, NULL);
}

/* read_status_locked reads one Status reply; a failed copy's code goes to *first if it is the
 * first failure. */
static CUresult read_status_locked(CUresult *first) {
    struct gc_reply r;
    CUresult rc = gc_read_frame_locked(&r);
    if (rc != CUDA_SUCCESS) return rc;
    struct gw_status st;
    char err[128];
    if (r.type != GW_TYPE_STATUS || gw_status_decode(&st, r.p, r.n, err, sizeof err) != 0)
        return gc_transport_error("malformed reply to a shared-memory copy");
    if (st.result != 0 && *first == CUDA_SUCCESS) *first = (CUresult)st.result;
    return CUDA_SUCCESS;
}

/* staged_copy_locked moves a pageable buffer through the staging chunks. Each chunk's reply says
 * its bytes have moved (the worker waits for an async chunk before answering), so its slot can
 * be reused. */
static CUresult staged_copy_locked(int to_device, uint64_t dev, char *p, size_t n, uint64_t stream, int async, CUresult *first) {
    uint16_t type = to_device ? GW_TYPE_MEMCPY_HTO_D_SHM : GW_TYPE_MEMCPY_DTO_H_SHM;
    size_t chunks = (n + shm.slot - 1) / shm.slot, sent = 0, done = 0;
    CUresult rc = CUDA_SUCCESS;
    if (gc_trace_on()) gc_trace("copy %s %zu bytes: staged in %zu chunks", to_device ? "h2d" : "d2h", n, chunks);
    while (done < chunks && rc == CUDA_SUCCESS) {
        while (sent < chunks && sent - done < SHM_SLOTS && rc == CUDA_SUCCESS) {
            size_t o = sent * shm.slot, len = n - o < shm.slot ? n - o : shm.slot;
            char *slot = shm.base + GW_SHM_CTL + (sent % SHM_SLOTS) * shm.slot;
            if (to_device) pcopy(slot, p + o, len);
            rc = send_copy_locked(type, dev + o, (uint64_t)(slot - shm.base), len, stream, async, 0);
            sent++;
            if (to_device) break; /* one chunk ahead: fill the next while this one copies */
        }
        if (rc != CUDA_SUCCESS) break;
        if (to_device && sent < chunks && sent - done < SHM_SLOTS) continue;
        rc = read_status_locked(first);
        if (rc == CUDA_SUCCESS && !to_device && *first == CUDA_SUCCESS) {
            size_t o = done * shm.slot, len = n - o < shm.slot ? n - o : shm.slot;
            pcopy(p + o, shm.base + GW_SHM_CTL + (done % SHM_SLOTS) * shm.slot, len);
        }
        done++;
    }
    return rc;
}

/* gc_shm_copy_locked moves n bytes between host memory at host and the device at dev (to_device:
 * host to device). Caller holds gc.mu and has selected the device. The host range is taken in
 * pieces: arena memory (pinned allocations, registered ranges) is one DMA, and an async one need
 * not be waited for; ordinary memory goes through the staging chunks. */
CUresult gc_shm_copy_locked(int to_device, uint64_t dev, void *host, size_t n, uint64_t stream, int async) {
    uint16_t type = to_device ? GW_TYPE_MEMCPY_HTO_D_SHM : GW_TYPE_MEMCPY_DTO_H_SHM;
    CUresult first = CUDA_SUCCESS, rc = CUDA_SUCCESS;
    char *p = host;
    for (size_t done = 0; done < n && rc == CUDA_SUCCESS;) {
        uint64_t off;
        size_t len = n - done;
        if (arena_span(p + done, n - done, &off, &len)) {
            if (gc_trace_on()) gc_trace("copy %s %zu bytes: one DMA at arena offset %llu", to_device ? "h2d" : "d2h", len, (unsigned long long)off);
            rc = send_copy_locked(type, dev + done, off, len, stream, async, async ? GW_FLAG_NO_REPLY : 0);
            if (rc == CUDA_SUCCESS && !async) rc = read_status_locked(&first);
        } else {
            rc = staged_copy_locked(to_device, dev + done, p + done, len, stream, async, &first);
        }
        done += len;
    }
    return rc != CUDA_SUCCESS ? rc : first;
}

/* ---- registered ranges moved into the arena (hostreg.c decides which) ---- */

/* gc_shm_adopt moves the pages [va, va+len) (page-aligned private anonymous memory) into the
 * arena: it takes a block, copies the contents there and maps the block over the range, so the
 * range keeps its address and contents but is now memory the worker has pinned. Other threads'
 * writes to the range wait meanwhile when the process may use userfaultfd (holdwrites.c);
 * otherwise one between the copy and the mapping is lost. Returns NULL and the block's offset,
 * or why not; *held says whether writes were held. Caller holds gc.mu. */
const char *gc_shm_adopt(char *va, size_t len, uint64_t *off, int *held) {
    if (!shm.base || shm.fd < 0) return "no arena";
    if (sysconf(_SC_PAGESIZE) != SHM_ALIGN) return "page size is not 4 KiB";
    if (!gc_maps_private_anon((uintptr_t)va, (uintptr_t)va + len)) return "not private anonymous read-write memory";
    char *blk = gc_shm_alloc(len);
    if (!blk) return "the arena is full";
    int hold = gc_hold_writes(va, len, 0);
    pcopy(blk, va, len);
    if (mmap(va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, shm.fd, shm.fd_off + (blk - shm.base)) == MAP_FAILED) {
        /* The kernel refuses before unmapping the old pages, except when out of memory midway:
         * then put private pages back with the contents. */
        gc_release_writes(hold);
        if (mmap(va, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED &&
            memcmp(va, blk, len) != 0)
            memcpy(va, blk, len);
        gc_shm_free(blk);
        return "mapping the arena over the range failed";
    }
    gc_release_writes(hold);
    *off = (uint64_t)(blk - shm.base);
    *held = hold >= 0;
    return NULL;
}

/* gc_shm_release puts private anonymous pages with the same contents back at [va, va+len) and
 * frees the arena block at off, holding writers as gc_shm_adopt does. Returns 0, or -1 (nothing
 * changed). Caller holds gc.mu. */
int gc_shm_release(char *va, size_t len, uint64_t off) {
    void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (tmp == MAP_FAILED) return -1;
    int hold = gc_hold_writes(va, len, 1);
    pcopy(tmp, va, len);
    if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, va) == MAP_FAILED) {
        gc_release_writes(hold);
        munmap(tmp, len);
        return -1;
    }
    gc_release_writes(hold);
    gc_shm_free(shm.base + off);
    return 0;
}

/* gc_shm_contains tells whether [p, p+n) touches the arena's own mapping. */
int gc_shm_contains(const void *p, size_t n) {
    const char *c = p;
    return shm.base && c < shm.base + shm.size && c + n > shm.base;
}

/* gc_shm_offset: whether p lies in the arena's pinned heap or in a registered range whose pages
 * moved into the arena; if so *off is its offset in the arena. */
int gc_shm_offset(const void *p, uint64_t *off) {
    size_t len = 1;
    return shm.base && arena_span(p, 1, off, &len);
}

/* gc_shm_alias_at maps the arena a second time at addr, the device's address of it (the worker's
 * registration), so that a pointer into this second mapping is both the program's and the device's
 * (managed memory, driver/managed.c). The pages are the arena's: writes through either mapping are
 * the same bytes. Returns the mapping, or NULL if addr is taken in this process or there is no
 * arena. Caller serialises. */
char *gc_shm_alias_at(uint64_t addr) {
    static char *alias;
    if (shm.base && addr == (uint64_t)(uintptr_t)shm.base) return shm.base; /* placed there already */
    if (alias) return (uint64_t)(uintptr_t)alias == addr ? alias : NULL;
    if (!shm.base || shm.fd < 0 || addr == 0) return NULL;
    void *p = mmap((void *)(uintptr_t)addr, shm.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, shm.fd,
                   shm.fd_off);
    if (p == MAP_FAILED) return NULL;
    if (p != (void *)(uintptr_t)addr) { /* an old kernel that took the address as a hint */
        munmap(p, shm.size);
        return NULL;
    }
    alias = p;
    return alias;
}

/* gc_shm_device_address is the arena's device address when the arena lies at it in this process
 * (place_arena), else 0. */
uint64_t gc_shm_device_address(void) { return shm.device_address; }

/* gc_shm_base is the program's first mapping of the arena (NULL without one). */
char *gc_shm_base(void) { return shm.base; }

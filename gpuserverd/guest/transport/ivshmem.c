/* A VM's channel to gpuserverd on its host (GPUCLOUD_ENDPOINT=ivshmem:<path>|ivshmem:auto): an
 * ivshmem-plain PCI device whose BAR 2 is the same file gpuserverd maps on the host. There is no
 * socket: the whole session, hello included, runs through the region. gpuserverd splits it into
 * N equal slots, each an independent channel for one process: slot i is [i*size, (i+1)*size),
 * laid out as a shared arena (rings, staging chunks, pinned heap; see shm.c) with a slot header in
 * its control area:
 *
 *   CH_OFF+0    u64 magic "GCIVSHM1"      written by gpuserverd once the header is valid
 *   CH_OFF+8    u32 version (2)
 *   CH_OFF+12   u32 state                 0 not served, 1 free, 2 claimed, 3 closed, 4 resetting
 *   CH_OFF+16   u64 size                  the slot's bytes
 *   CH_OFF+24   u32 generation            gpuserverd bumps it whenever it resets the slot
 *   CH_OFF+28   u32 slots                 N
 *   CH_OFF+32   u32 index                 this slot's number
 *   CH_OFF+64   u64 server heartbeat      gpuserverd adds 1 every CH_BEAT_NS
 *   CH_OFF+128  u64 client heartbeat      this library adds 1 every CH_BEAT_NS while claimed
 *
 * (gpuserverd/ivshmem/channel.go is the other side of this layout.) A process claims the first
 * free slot by moving its state from free to claimed atomically; with none free it is told all
 * are in use (and the endpoint list's next entry, TCP, is tried). The ring doorbell polls (ring.c); peer death is a heartbeat
 * that stops or a generation that changes, seen within GPUCLOUD_IVSHMEM_TIMEOUT_MS (default 5000):
 * calls then fail with CUDA_ERROR_UNKNOWN rather than hang. On exit the claim is released. */
#include "transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CH_OFF 4096
#define CH_MAGIC 0x314d485356494347ull /* "GCIVSHM1" */
#define CH_VERSION 2
#define CH_MAX_SLOTS 64
#define CH_BEAT_NS 100000000L
#define CH_TIMEOUT_MS 5000

enum { ST_UNSERVED, ST_FREE, ST_CLAIMED, ST_CLOSED, ST_RESETTING };

struct ch_header {
    uint64_t magic;
    uint32_t version, state;
    uint64_t size;
    uint32_t gen, slots, index;
    char pad1[28];
    uint64_t server_beat;
    char pad2[56];
    uint64_t client_beat;
};
_Static_assert(__builtin_offsetof(struct ch_header, server_beat) == 64, "layout");
_Static_assert(__builtin_offsetof(struct ch_header, client_beat) == 128, "layout");

static struct {
    char *base; /* the claimed slot */
    size_t size;
    char *map; /* the whole region */
    size_t map_size;
    unsigned slot;
    int fd;
    int uncached; /* the mapping behaves as uncached (probe_caching) */
    struct ch_header *h;
    uint32_t gen;
    long timeout_ms;
    uint64_t last_beat;
    double last_beat_at;
    char path[700];
} ch;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* read_small reads a short sysfs attribute into out. */
static int read_small(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    out[strcspn(out, "\r\n")] = 0;
    return 0;
}

/* find_device writes the resource2 path of the first ivshmem device (1af4:1110) under
 * $GPUCLOUD_SYSFS (default /sys) into out. resource2, not resource2_wc: the kernel maps the first
 * uncached and the second write-combining (weakly ordered, which the rings do not allow for);
 * under KVM on Intel the guest's PAT is ignored for this RAM-backed BAR by default, so it is
 * write-back in effect (docs/gpuserverd/transports.md, "Zero-copy in VMs"). */
static int find_device(char *out, size_t cap) {
    const char *sys = getenv("GPUCLOUD_SYSFS");
    char dir[256], p[640], v[32], d[32];
    snprintf(dir, sizeof dir, "%s/bus/pci/devices", sys && *sys ? sys : "/sys");
    DIR *dp = opendir(dir);
    if (!dp) return -1;
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s/vendor", dir, e->d_name);
        if (read_small(p, v, sizeof v) != 0 || strcmp(v, "0x1af4") != 0) continue;
        snprintf(p, sizeof p, "%s/%s/device", dir, e->d_name);
        if (read_small(p, d, sizeof d) != 0 || strcmp(d, "0x1110") != 0) continue;
        if ((size_t)snprintf(out, cap, "%s/%s/resource2", dir, e->d_name) < cap) found = 0;
    }
    closedir(dp);
    return found;
}

static uint32_t ld32(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static uint64_t ld64(uint64_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }

/* peer_gone is the polling doorbell's liveness check: gpuserverd reset the channel (its worker
 * ended), or stopped beating for longer than the timeout (it died, or the host hangs). */
static int peer_gone(void) {
    if (ld32(&ch.h->gen) != ch.gen || ld32(&ch.h->state) != ST_CLAIMED) {
        fprintf(stderr, "gpucloud: gpuserverd ended the session on the ivshmem channel %s (slot %u)\n", ch.path, ch.slot);
        return 1;
    }
    uint64_t b = ld64(&ch.h->server_beat);
    double t = now_ms();
    if (b != ch.last_beat) {
        ch.last_beat = b;
        ch.last_beat_at = t;
        return 0;
    }
    if (t - ch.last_beat_at > ch.timeout_ms) {
        fprintf(stderr, "gpucloud: gpuserverd stopped answering on the ivshmem channel %s (no heartbeat for %ld ms)\n",
                ch.path, ch.timeout_ms);
        return 1;
    }
    return 0;
}

/* beat tells the worker this process is alive, until the channel is reset under it. */
static void *beat(void *arg) {
    (void)arg;
    while (ld32(&ch.h->gen) == ch.gen && ld32(&ch.h->state) == ST_CLAIMED) {
        __atomic_add_fetch(&ch.h->client_beat, 1, __ATOMIC_SEQ_CST);
        struct timespec ts = {0, CH_BEAT_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* release gives the channel back at exit; a later process in the VM may then claim it. */
static void release(void) {
    uint32_t want = ST_CLAIMED;
    if (ld32(&ch.h->gen) == ch.gen)
        __atomic_compare_exchange_n(&ch.h->state, &want, ST_CLOSED, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static int fail(int fd, void *p, size_t n, const char *fmt, const char *what) {
    fprintf(stderr, fmt, ch.path, what);
    if (p) munmap(p, n);
    if (fd >= 0) close(fd);
    return -1;
}

/* claim_slot claims the first free slot of the region p, whose slot 0 header h0 has been checked,
 * and returns its index; -1 with why set when none is free. */
static int claim_slot(char *p, const struct ch_header *h0, const char **why) {
    uint32_t slots = h0->slots;
    size_t size = (size_t)h0->size;
    unsigned busy = 0;
    for (uint32_t i = 0; i < slots; i++) {
        struct ch_header *h = (struct ch_header *)(p + (size_t)i * size + CH_OFF);
        if (ld64(&h->magic) != CH_MAGIC || h->version != CH_VERSION || h->size != size || h->slots != slots || h->index != i)
            continue; /* being reset under a new layout */
        uint32_t gen = ld32(&h->gen), want = ST_FREE;
        if (__atomic_compare_exchange_n(&h->state, &want, ST_CLAIMED, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            ch.gen = gen;
            return (int)i;
        }
        busy += want == ST_CLAIMED;
    }
    static char msg[160];
    if (busy == slots)
        snprintf(msg, sizeof msg, "has all %u channels in use by other processes (one session per channel)", slots);
    else
        snprintf(msg, sizeof msg, "has no free channel (%u of %u in use, the others being reset or not served)", busy, slots);
    *why = msg;
    return -1;
}

int gc_ivshmem_open(const char *spec) {
    if (strcmp(spec, "auto") == 0) {
        if (find_device(ch.path, sizeof ch.path) != 0) {
            fprintf(stderr, "gpucloud: ivshmem:auto: no ivshmem PCI device (1af4:1110) in sysfs\n");
            return -1;
        }
    } else {
        snprintf(ch.path, sizeof ch.path, "%s", spec);
    }
    const char *t = getenv("GPUCLOUD_IVSHMEM_TIMEOUT_MS");
    ch.timeout_ms = t && atol(t) > 0 ? atol(t) : CH_TIMEOUT_MS;
    int fd = open(ch.path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return fail(-1, NULL, 0, "gpucloud: cannot open the ivshmem channel %s: %s\n", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < CH_OFF + (off_t)sizeof(struct ch_header) || sb.st_size < GW_SHM_MIN)
        return fail(fd, NULL, 0, "gpucloud: the ivshmem channel %s is %s\n", "too small to be a gpucloud channel");
    size_t n = (size_t)sb.st_size;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return fail(fd, NULL, 0, "gpucloud: cannot map the ivshmem channel %s: %s\n", strerror(errno));
    struct ch_header *h = (struct ch_header *)(p + CH_OFF);
    if (ld64(&h->magic) != CH_MAGIC)
        return fail(fd, p, n, "gpucloud: the ivshmem channel %s %s\n", "has no gpucloud header: gpuserverd does not serve it");
    if (h->version != CH_VERSION) return fail(fd, p, n, "gpucloud: the ivshmem channel %s %s\n", "has an unknown header version");
    uint32_t slots = h->slots;
    if (slots == 0 || slots > CH_MAX_SLOTS || h->index != 0 || h->size < GW_SHM_MIN || h->size * slots != n)
        return fail(fd, p, n, "gpucloud: the ivshmem channel %s %s\n", "header's size differs from the region's");
    const char *why = NULL;
    int slot = claim_slot(p, h, &why);
    if (slot < 0) return fail(fd, p, n, "gpucloud: the ivshmem channel %s %s\n", why);
    ch.map = p;
    ch.map_size = n;
    ch.size = (size_t)h->size;
    ch.slot = (unsigned)slot;
    ch.base = p + (size_t)slot * ch.size;
    ch.h = (struct ch_header *)(ch.base + CH_OFF);
    ch.fd = fd;
    ch.last_beat = ld64(&ch.h->server_beat);
    ch.last_beat_at = now_ms();
    atexit(release);
    gc_spawn_detached(beat);
    gc_rings_start(ch.base, peer_gone);
    if (gc_trace_on()) gc_trace("ivshmem channel %s: slot %u of %u, %zu bytes, generation %u", ch.path, ch.slot, slots, ch.size, ch.gen);
    return fd;
}

/* read_us is how long reading n bytes at p takes, in microseconds (volatile: every load is made). */
static double read_us(const volatile uint64_t *p, size_t n) {
    double t0 = now_ms();
    for (size_t i = 0; i < n / 8; i++) (void)p[i];
    return (now_ms() - t0) * 1e3;
}

/* probe_caching tells whether the slot's mapping behaves as uncached: the guest's PAT makes a sysfs
 * resource2 mapping uncached, which KVM ignores on Intel by default (write-back in effect) but
 * honours on AMD (README, "Zero-copy in VMs"). Reading 256 KiB of a staging chunk twice against
 * the same of ordinary memory tells them apart (cached: microseconds; uncached: milliseconds).
 * GPUCLOUD_IVSHMEM_CACHING=wb or uc says it instead. */
#define PROBE_BYTES (256u << 10)
static int probe_caching(void) {
    const char *v = getenv("GPUCLOUD_IVSHMEM_CACHING");
    if (v && !strcmp(v, "uc")) return 1;
    if (v && !strcmp(v, "wb")) return 0;
    uint64_t *mine = malloc(PROBE_BYTES);
    if (!mine || ch.size < GW_SHM_CTL + PROBE_BYTES) {
        free(mine);
        return 0;
    }
    memset(mine, 1, PROBE_BYTES);
    const uint64_t *bar = (const uint64_t *)(ch.base + GW_SHM_CTL); /* a staging chunk: nobody's yet */
    read_us(bar, PROBE_BYTES); /* first touch */
    read_us(mine, PROBE_BYTES);
    double b = read_us(bar, PROBE_BYTES), m = read_us(mine, PROBE_BYTES);
    free(mine);
    int uc = b > 10 * m && b > 500; /* 10x slower and half a millisecond: no cache in the way */
    if (gc_trace_on())
        gc_trace("ivshmem mapping: %s (256 KiB read in %.0f us, ordinary memory %.0f us)", uc ? "uncached" : "cached", b, m);
    return uc;
}

int gc_ivshmem_uncached(void) { return ch.base && ch.uncached; }

/* gc_ivshmem_adopt makes the claimed slot the session's arena; registered ranges are mapped from
 * the channel's own descriptor at the slot's offset (a sysfs resource file maps at page offsets
 * like any file), so they become memory the worker pinned too. */
int gc_ivshmem_adopt(void) {
    if (!ch.base || gc_shm_attach(ch.base, ch.size) != 0) return -1;
    ch.uncached = probe_caching();
    gc_shm_map_from(ch.fd, (off_t)ch.slot * (off_t)ch.size);
    return 0;
}

int gc_ivshmem_on(void) { return ch.base != NULL; }

void gc_ivshmem_release(void) { release(); }

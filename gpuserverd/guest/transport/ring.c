/* The control rings of a shared arena (layout: wire spec, shm_ctl): two byte streams, ring 0 for
 * this library's frames and ring 1 for the worker's. A waiting side spins for RING_SPIN_NS, then
 * waits on its doorbell, one of two kinds:
 *   - futex (a process on the GPU host, arena from a memfd): it sleeps on a futex word the other
 *     side wakes; while asleep it checks every 100 ms that the worker's socket is still open;
 *   - polling (a VM's ivshmem region): a futex wake cannot cross the VM boundary and ivshmem-plain
 *     has no interrupts, so it sleeps in short, growing naps (RING_NAP_MIN_NS up to
 *     RING_NAP_MAX_NS) and re-reads the word; every RING_CHECK_NS it asks ivshmem.c whether the
 *     server is still there (heartbeat and generation words).
 * The trade-off of polling: a reply that comes while the waiter spins (RING_POLL_SPIN_NS, 2 ms:
 * longer than the futex doorbell's spin) costs nothing extra; one that comes after costs up to
 * RING_NAP_MAX_NS more (RING_NAP_IDLE_NS once the wait has lasted
 * RING_IDLE_NS), and a waiting thread wakes at most 5000 times a second at first, 500 after:
 * a few percent of one core, then well under one.
 * One reader and one writer per ring (callers hold gc.mu). */
#define _GNU_SOURCE 1 /* POLLRDHUP */
#include "transport.h"

#include <linux/futex.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct ring {
    uint32_t *head, *tail, *rwait, *wwait;
    char *data;
    uint32_t size;
};
static struct ring ring_out, ring_in; /* ring 0: our frames; ring 1: the worker's */
int gc_ring_on;

#define RING_SPIN_NS 50000
#define RING_POLL_SPIN_NS 2000000 /* the polling doorbell's spin: a waiting call's first 2 ms */
#define RING_NAP_MIN_NS 2000
#define RING_NAP_MAX_NS 200000
#define RING_IDLE_NS 100000000L    /* after waiting this long, a longer nap: */
#define RING_NAP_IDLE_NS 2000000L  /* a program idle for long pays at most 2 ms on its next call */
#define RING_CHECK_NS 50000000

/* The doorbell: how a side waits for a word to change and wakes the other. */
struct doorbell {
    int (*wait)(uint32_t *word, uint32_t seen, uint32_t *sleeping); /* 0, or -1: peer gone */
    void (*wake)(uint32_t *word, uint32_t *sleeping);
};
static const struct doorbell *bell;
static int (*poll_peer_gone)(void); /* the polling doorbell's liveness check */

static void ring_init(struct ring *r, char *base, int idx) {
    char *h = base + idx * 2048;
    r->head = (uint32_t *)h;
    r->tail = (uint32_t *)(h + 64);
    r->rwait = (uint32_t *)(h + 128);
    r->wwait = (uint32_t *)(h + 192);
    r->data = base + (size_t)(idx + 1) * GW_SHM_RING;
    r->size = GW_SHM_RING;
}

static uint32_t ld(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void st(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

/* peer_gone tells whether the worker has closed the socket (it died or the session ended). */
static int peer_gone(void) {
    struct pollfd p = {.fd = gc.fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
    char b;
    return recv(gc.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static double mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* spin_for returns 1 if *word changed from seen within ns. */
static int spin_for(uint32_t *word, uint32_t seen, double ns) {
    double start = mono_ns();
    for (unsigned i = 1;; i++) {
        if (ld(word) != seen) return 1;
        if ((i & 255) == 0 && mono_ns() - start > ns) return 0;
        __builtin_ia32_pause();
    }
}

static int spin(uint32_t *word, uint32_t seen) { return spin_for(word, seen, RING_SPIN_NS); }

/* futex_wait returns 0 once *word is no longer seen, -1 if the worker has gone. */
static int futex_wait(uint32_t *word, uint32_t seen, uint32_t *sleeping) {
    if (spin(word, seen)) return 0;
    st(sleeping, 1); /* then re-check: the other side stores its counter first, then reads this */
    int rc = 0;
    while (ld(word) == seen) {
        struct timespec ts = {0, 100000000};
        syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
        if (ld(word) != seen) break;
        if (peer_gone()) {
            rc = -1;
            break;
        }
    }
    st(sleeping, 0);
    return rc;
}

static void futex_wake(uint32_t *word, uint32_t *sleeping) {
    if (ld(sleeping)) syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static const struct doorbell futex_bell = {futex_wait, futex_wake};

/* poll_wait naps instead of sleeping on a futex; nobody rings it. It spins longer first
 * (RING_POLL_SPIN_NS): the waiting thread is blocked in a CUDA call, which NVIDIA's driver also
 * serves by spinning, and a nap ends late (its length plus the kernel's timer slack), which
 * measured as a 20% loss on 64 MiB pinned copies (1.2 ms each) with a 50 us spin. */
static int poll_wait(uint32_t *word, uint32_t seen, uint32_t *sleeping) {
    (void)sleeping;
    if (spin_for(word, seen, RING_POLL_SPIN_NS)) return 0;
    long nap = RING_NAP_MIN_NS;
    double began = mono_ns(), last_check = began;
    while (ld(word) == seen) {
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        if (ld(word) != seen) break;
        double now = mono_ns();
        long cap = now - began > RING_IDLE_NS ? RING_NAP_IDLE_NS : RING_NAP_MAX_NS;
        nap = nap * 2 < cap ? nap * 2 : cap;
        if (now - last_check > RING_CHECK_NS) {
            last_check = now;
            if (poll_peer_gone && poll_peer_gone()) return -1;
        }
    }
    return 0;
}

static void poll_wake(uint32_t *word, uint32_t *sleeping) { (void)word, (void)sleeping; }

static const struct doorbell poll_bell = {poll_wait, poll_wake};

int gc_ring_write(const void *buf, size_t n) {
    const char *p = buf;
    struct ring *r = &ring_out;
    while (n > 0) {
        uint32_t head = ld(r->head), tail = ld(r->tail), free_ = r->size - (head - tail);
        if (free_ == 0) {
            if (bell->wait(r->tail, tail, r->wwait) != 0) return -1;
            continue;
        }
        uint32_t c = n < free_ ? (uint32_t)n : free_, off = head % r->size, k = r->size - off < c ? r->size - off : c;
        memcpy(r->data + off, p, k);
        memcpy(r->data, p + k, c - k);
        st(r->head, head + c);
        bell->wake(r->head, r->rwait);
        p += c;
        n -= c;
    }
    return 0;
}

int gc_ring_read(void *buf, size_t n) {
    char *p = buf;
    struct ring *r = &ring_in;
    while (n > 0) {
        uint32_t head = ld(r->head), tail = ld(r->tail);
        if (head == tail) {
            if (bell->wait(r->head, head, r->rwait) != 0) return -1;
            continue;
        }
        uint32_t avail = head - tail, c = n < avail ? (uint32_t)n : avail, off = tail % r->size;
        uint32_t k = r->size - off < c ? r->size - off : c;
        memcpy(p, r->data + off, k);
        memcpy(p + k, r->data, c - k);
        st(r->tail, tail + c);
        bell->wake(r->tail, r->wwait);
        p += c;
        n -= c;
    }
    return 0;
}

void gc_rings_start(char *arena, int (*peer_gone_poll)(void)) {
    ring_init(&ring_out, arena, 0);
    ring_init(&ring_in, arena, 1);
    bell = peer_gone_poll ? &poll_bell : &futex_bell;
    poll_peer_gone = peer_gone_poll;
    gc_ring_on = 1;
}

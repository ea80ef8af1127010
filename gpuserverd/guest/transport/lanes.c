/* Lanes: extra connections of the session for large copies. One loopback TCP stream moves about
 * 4 GB/s on the GPU host (one thread on each side copies every byte); striping a copy over
 * several connections, each served by its own thread here and in the worker, multiplies that.
 * Piece i (GW_STRIPE_CHUNK bytes, the last shorter) travels raw on lane i mod lanes; the copy's
 * request and its Status reply go on the session's connection. */
#include "transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LANES_DEFAULT 4

struct lane {
    int fd;
    int idx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;   /* a job is posted and not finished */
    int failed; /* the job's transfer failed */
    int quit;   /* the lane was given up: its thread closes it and ends once idle */
    char *base;
    size_t bytes;
    int read;
};
/* The lanes in use. Given-up lanes are not freed (their threads may still touch them); a
 * session gives lanes up only when its stream is resumed, a handful of times at most. */
static struct lane *lanes[GW_MAX_LANES];
static int nlanes;
static int dropped; /* the session moved to a server the lanes do not reach: copies go unstriped */
static int reopen;  /* dropped after a resume: the next large copy opens lanes again */
static char lane_sid[257];
static struct gw_hello_reply lane_hr; /* the session's id, for LaneHello */

/* Every lane and the session's connection end: a lane out of step cannot be resynchronised. */
static void break_all(void) {
    gc_resume_disarm(); /* a stream whose lanes fell out of step must not be resumed */
    for (int i = 0; i < nlanes; i++) shutdown(lanes[i]->fd, SHUT_RDWR);
    shutdown(gc.fd, SHUT_RDWR);
}

static int lane_io(struct lane *l, int idx) {
    size_t pieces = (l->bytes + GW_STRIPE_CHUNK - 1) / GW_STRIPE_CHUNK;
    for (size_t i = (size_t)idx; i < pieces; i += (size_t)nlanes) {
        size_t off = i * GW_STRIPE_CHUNK, n = l->bytes - off < GW_STRIPE_CHUNK ? l->bytes - off : GW_STRIPE_CHUNK;
        char *p = l->base + off;
        while (n > 0) {
            ssize_t r = l->read ? recv(l->fd, p, n, 0) : send(l->fd, p, n, MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return -1;
            p += r;
            n -= (size_t)r;
        }
    }
    return 0;
}

static void *lane_main(void *arg) {
    struct lane *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->busy && !l->quit) pthread_cond_wait(&l->cv, &l->mu);
        if (!l->busy) break; /* given up and idle */
        pthread_mutex_unlock(&l->mu);
        int failed = lane_io(l, l->idx) != 0;
        if (failed && !__atomic_load_n(&dropped, __ATOMIC_RELAXED)) break_all();
        pthread_mutex_lock(&l->mu);
        l->failed = failed;
        l->busy = 0;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    close(l->fd);
    return NULL;
}

/* lane_dial opens lane idx and presents the key; 0 when the worker accepted it. */
static int lane_dial(const char *endpoint, const struct gw_hello_reply *hr, const void *key, uint32_t idx) {
    int fd = gc_dial(endpoint);
    if (fd < 0) return -1;
    struct gw_lane_hello m = {.version = GW_VERSION, .session_id = hr->session_id, .session_id_len = hr->session_id_len,
                              .key = key, .key_len = 32, .lane = idx};
    uint8_t b[GW_HEADER_SIZE + 512], h[GW_HEADER_SIZE + 4096];
    size_t n = gw_lane_hello_size(&m);
    gc_put_header(b, (uint32_t)n, GW_TYPE_LANE_HELLO, 0, 0);
    gw_lane_hello_encode(&m, b + GW_HEADER_SIZE);
    struct gw_status st;
    char err[128];
    uint32_t len;
    if (send(fd, b, GW_HEADER_SIZE + n, MSG_NOSIGNAL) != (ssize_t)(GW_HEADER_SIZE + n) ||
        gc_read_full_fd(fd, h, GW_HEADER_SIZE) != 0 || (len = gw_u32_at(h, 0)) > sizeof h - GW_HEADER_SIZE ||
        (h[4] | h[5] << 8) != GW_TYPE_STATUS || gc_read_full_fd(fd, h + GW_HEADER_SIZE, len) != 0 ||
        gw_status_decode(&st, h + GW_HEADER_SIZE, len, err, sizeof err) != 0 || st.result != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* open_lanes asks the worker for lanes (GPUCLOUD_LANES, default 4; 0 or 1: none) and dials
 * them; copies use the lanes it could open. Caller holds no lock. */
static void open_lanes(const char *endpoint, const struct gw_hello_reply *hr) {
    const char *v = getenv("GPUCLOUD_LANES");
    int want = v && *v ? atoi(v) : LANES_DEFAULT;
    if (want > GW_MAX_LANES) want = GW_MAX_LANES;
    if (want < 2) return;
    struct gw_lanes_open m = {.lanes = (uint32_t)want};
    uint8_t b[16];
    size_t n = gw_lanes_open_size(&m);
    gw_lanes_open_encode(&m, b);
    struct gc_reply r;
    struct gw_lanes_open_reply lr;
    uint8_t key[32];
    char err[128];
    pthread_mutex_lock(&gc.mu);
    CUresult rc = gc_xfer_locked(GW_TYPE_LANES_OPEN, 0, b, n, NULL, 0, GW_TYPE_LANES_OPEN_REPLY, &r);
    int ok = rc == CUDA_SUCCESS && gw_lanes_open_reply_decode(&lr, r.p, r.n, err, sizeof err) == 0 &&
             lr.result == 0 && lr.key_len == sizeof key && lr.lanes >= 2 && lr.lanes <= (uint32_t)want;
    if (ok) memcpy(key, lr.key, sizeof key);
    pthread_mutex_unlock(&gc.mu);
    if (!ok) return; /* an older or lane-less server: one connection carries everything */
    struct lane *got_lanes[GW_MAX_LANES];
    int got = 0;
    for (uint32_t i = 0; i < lr.lanes; i++) {
        int fd = lane_dial(endpoint, hr, key, i);
        if (fd < 0) break;
        struct lane *l = calloc(1, sizeof *l);
        if (!l) {
            close(fd);
            break;
        }
        l->fd = fd;
        l->idx = got;
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv, NULL);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int e = pthread_create(&l->thread, &a, lane_main, l);
        pthread_attr_destroy(&a);
        if (e != 0) {
            close(fd);
            free(l);
            break;
        }
        got_lanes[got++] = l;
    }
    if (got < 2) {
        if (getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud: lanes: %d of %u opened; not striping\n", got, lr.lanes);
        got = 0; /* the dialled lanes idle; the worker never waits on them */
    }
    pthread_mutex_lock(&gc.mu); /* copies read the lanes under it */
    memcpy(lanes, got_lanes, sizeof(struct lane *) * (size_t)got);
    nlanes = got;
    __atomic_store_n(&dropped, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&gc.mu);
    if (got && getenv("GPUCLOUD_DEBUG")) fprintf(stderr, "gpucloud: %d lanes open\n", got);
}

/* gc_open_lanes opens the session's lanes after the handshake, keeping its id for reopening them
 * after a resume. Caller holds no lock; runs once. */
void gc_open_lanes(const char *endpoint, const struct gw_hello_reply *hr) {
    if (hr->session_id_len < sizeof lane_sid) {
        memcpy(lane_sid, hr->session_id, hr->session_id_len);
        lane_hr.session_id = lane_sid;
        lane_hr.session_id_len = hr->session_id_len;
    }
    open_lanes(endpoint, hr);
}

/* gc_lanes_reopen opens lanes again on the server that now serves the session, after a resume
 * or a move gave the old ones up (gc_lanes_resumed). The next large copy calls it, with no lock
 * held; one caller does the work, the others copy unstriped meanwhile. */
void gc_lanes_reopen(void) {
    if (!__atomic_load_n(&reopen, __ATOMIC_RELAXED) || !__atomic_exchange_n(&reopen, 0, __ATOMIC_ACQ_REL)) return;
    if (lane_hr.session_id == NULL) return;
    open_lanes(gc_resume_endpoint(), &lane_hr);
}

/* gc_lanes_resumed gives the lanes up after the session's stream was resumed (the worker that
 * serves it may be another, which the lanes do not reach) and asks for them to be opened again
 * at the next large copy. Caller holds gc.mu. */
void gc_lanes_resumed(void) {
    gc_lanes_drop();
    if (nlanes > 0) __atomic_store_n(&reopen, 1, __ATOMIC_RELEASE);
}

int gc_lanes(void) { return __atomic_load_n(&dropped, __ATOMIC_RELAXED) ? 0 : nlanes; }

/* gc_lanes_drop stops striping: the session moved to a server these lanes do not reach. A
 * striped copy in flight (its request went to the old server after it stopped reading) fails on
 * its lanes without breaking the session; the new server answers it GW_STRIPE_RETRY and the copy
 * is made again unstriped. Caller holds gc.mu. */
void gc_lanes_drop(void) {
    __atomic_store_n(&dropped, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < nlanes; i++) {
        struct lane *l = lanes[i];
        shutdown(l->fd, SHUT_RDWR);
        pthread_mutex_lock(&l->mu);
        l->quit = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
}

/* gc_striped_locked moves n bytes at p over the lanes (read: into p) while the request goes out
 * on the session's connection and its Status reply comes back; GW_STRIPE_RETRY: the session
 * moved meanwhile and nothing was copied, make the copy unstriped. Caller holds gc.mu. */
CUresult gc_striped_locked(uint16_t type, const uint8_t *head, size_t head_n, char *p, size_t n, int read) {
    for (int i = 0; i < nlanes; i++) {
        struct lane *l = lanes[i];
        pthread_mutex_lock(&l->mu);
        l->base = p;
        l->bytes = n;
        l->read = read;
        l->failed = 0;
        l->busy = 1;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
    struct gc_reply r;
    CUresult rc = gc_xfer_locked(type, 0, head, head_n, NULL, 0, GW_TYPE_STATUS, &r);
    if (rc != CUDA_SUCCESS) break_all(); /* lanes blocked on a dead session wake and fail */
    int failed = 0;
    for (int i = 0; i < nlanes; i++) {
        struct lane *l = lanes[i];
        pthread_mutex_lock(&l->mu);
        while (l->busy) pthread_cond_wait(&l->cv, &l->mu);
        failed |= l->failed;
        pthread_mutex_unlock(&l->mu);
    }
    if (rc != CUDA_SUCCESS) return rc;
    struct gw_status st;
    char err[128];
    if (gw_status_decode(&st, r.p, r.n, err, sizeof err) != 0) return gc_transport_error(err);
    if (st.result == GW_STRIPE_RETRY && __atomic_load_n(&dropped, __ATOMIC_RELAXED)) return (CUresult)GW_STRIPE_RETRY;
    if (failed) return gc_transport_error("a copy lane failed");
    if (st.result != 0 && getenv("GPUCLOUD_DEBUG"))
        fprintf(stderr, "gpucloud: %s failed (%d): %.*s\n", gw_type_name(type), st.result, (int)st.message_len, st.message);
    return (CUresult)st.result;
}

/* Resuming a session over a new connection (issue 18; gpuserverd/README.md, "Resume").
 *
 * On a TCP session the guest counts the bytes of its stream after the Hello, received and sent,
 * and keeps the last RESUME_KEEP bytes it sent. When the connection fails, the thread that saw it
 * (holding gc.mu) dials the endpoint again, presents Resume{session, secret, received} and learns
 * how much of its own stream the worker received; each end resends what the other missed, the
 * new socket takes the old one's descriptor number, and the read or write that failed goes on.
 * Frames never see the break, so every call is answered exactly once. Lanes are not re-opened:
 * after a resume copies go unstriped (the stream may be another worker's now: a restored or moved
 * session), and a striped copy cut mid-way ends the session as before.
 *
 * A session that moves to another server (live migration) ends the old server's stream with
 * MigrateRedirect; the guest resumes the same way at the address it names (gc_redirect_locked). */
#include "transport.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RESUME_KEEP (32u << 20)
#define RESUME_DEFAULT_S 30

static struct {
    int counting;           /* the stream is counted and kept */
    int armed;              /* the worker granted a resume window */
    uint64_t in, out;       /* bytes received and sent after the Hello */
    uint8_t *kept;          /* the last sent bytes, a ring indexed by out % RESUME_KEEP */
    char endpoint[512];
    char sid[257];
    uint8_t secret[32];
    uint32_t window_ms;
} rs;

void gc_resume_begin(const char *endpoint) {
    rs.kept = malloc(RESUME_KEEP);
    if (!rs.kept) return;
    snprintf(rs.endpoint, sizeof rs.endpoint, "%s", endpoint);
    rs.counting = 1;
    rs.in = rs.out = 0;
}

static void resume_off(void) {
    rs.counting = rs.armed = 0;
    free(rs.kept);
    rs.kept = NULL;
}

/* gc_resume_endpoint is where the session is served now (a move changes it). */
const char *gc_resume_endpoint(void) { return rs.endpoint; }

void gc_resume_disarm(void) { __atomic_store_n(&rs.armed, 0, __ATOMIC_RELAXED); } /* from a lane thread */

void gc_resume_hello_sent(size_t hello_bytes) {
    if (rs.counting) rs.out -= hello_bytes; /* the stream the worker counts starts after the Hello */
}

void gc_resume_note_sent(const struct iovec *iov, int cnt) {
    if (!rs.counting) return;
    for (int i = 0; i < cnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        while (n > 0) {
            size_t at = (size_t)(rs.out % RESUME_KEEP), k = RESUME_KEEP - at;
            if (k > n) k = n;
            memcpy(rs.kept + at, p, k);
            p += k;
            n -= k;
            rs.out += k;
        }
    }
}

void gc_resume_note_received(size_t n) {
    if (rs.counting) rs.in += n;
}

/* gc_resume_open_locked asks the worker for a resume window (GPUCLOUD_RESUME_S seconds, default
 * 30; 0 turns resuming off). A worker that cannot (an older one, a session with an arena) says so
 * and the session goes on without. */
void gc_resume_open_locked(const char *session_id) {
    if (!rs.counting) return;
    const char *v = getenv("GPUCLOUD_RESUME_S");
    long secs = v && *v ? strtol(v, NULL, 10) : RESUME_DEFAULT_S;
    if (secs <= 0) {
        resume_off();
        return;
    }
    struct gw_resume_open m = {.window_ms = (uint32_t)(secs > 300 ? 300000 : secs * 1000)};
    uint8_t b[16];
    size_t n = gw_resume_open_size(&m);
    gw_resume_open_encode(&m, b);
    struct gc_reply r;
    CUresult rc = gc_xfer_locked(GW_TYPE_RESUME_OPEN, 0, b, n, NULL, 0, GW_TYPE_RESUME_OPEN_REPLY, &r);
    struct gw_resume_open_reply rr;
    char err[128];
    if (rc != CUDA_SUCCESS || gw_resume_open_reply_decode(&rr, r.p, r.n, err, sizeof err) != 0 || rr.result != 0 ||
        rr.window_ms == 0 || rr.secret_len != sizeof rs.secret) {
        resume_off();
        return;
    }
    memcpy(rs.secret, rr.secret, sizeof rs.secret);
    snprintf(rs.sid, sizeof rs.sid, "%s", session_id);
    rs.window_ms = rr.window_ms;
    rs.armed = 1;
}

static int resume_loop(void);

static int send_raw(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* try_resume presents Resume on fd; 0: the streams are spliced and fd carries the session; -2:
 * refused (the session is gone: its worker ended), so trying again is pointless; -1: try again. */
static int try_resume(int fd) {
    struct gw_resume m = {.version = GW_VERSION, .session_id = rs.sid, .session_id_len = (uint32_t)strlen(rs.sid),
                          .secret = rs.secret, .secret_len = sizeof rs.secret, .received = rs.in};
    uint8_t b[GW_HEADER_SIZE + 512];
    size_t n = gw_resume_size(&m);
    gc_put_header(b, (uint32_t)n, GW_TYPE_RESUME, 0, 0);
    gw_resume_encode(&m, b + GW_HEADER_SIZE);
    if (send_raw(fd, b, GW_HEADER_SIZE + n) != 0) return -1;
    uint8_t h[GW_HEADER_SIZE], p[1100];
    if (gc_read_full_fd(fd, h, sizeof h) != 0) return -1;
    uint32_t len = gw_u32_at(h, 0);
    if ((h[4] | h[5] << 8) != GW_TYPE_RESUME_REPLY || len > sizeof p || gc_read_full_fd(fd, p, len) != 0) return -1;
    struct gw_resume_reply rr;
    char err[128];
    if (gw_resume_reply_decode(&rr, p, len, err, sizeof err) != 0) return -1;
    if (rr.result != 0) {
        fprintf(stderr, "gpucloud: resuming the session refused (%d): %.*s\n", rr.result, (int)rr.message_len, rr.message);
        return -2;
    }
    if (rr.received > rs.out || rs.out - rr.received > RESUME_KEEP) return -2;
    for (uint64_t at = rr.received; at < rs.out;) {
        size_t i = (size_t)(at % RESUME_KEEP), k = RESUME_KEEP - i;
        if (k > rs.out - at) k = (size_t)(rs.out - at);
        if (send_raw(fd, rs.kept + i, k) != 0) return -1;
        at += k;
    }
    return 0;
}

int gc_resume_locked(void) {
    if (!__atomic_load_n(&rs.armed, __ATOMIC_RELAXED)) return -1;
    fprintf(stderr, "gpucloud: connection to gpuserverd lost; resuming the session (up to %u ms)\n", rs.window_ms);
    return resume_loop();
}

/* gc_redirect_locked follows a MigrateRedirect (payload p of n bytes), the last frame of the
 * old server's stream: the session now lives at the address it names, and the guest resumes
 * its stream there with the secret it carries, as after a dropped connection. Lanes to the old
 * server are given up: copies go on the session's connection. 0: the stream goes on. */
int gc_redirect_locked(const uint8_t *p, size_t n) {
    struct gw_migrate_redirect m;
    char err[128];
    if (!__atomic_load_n(&rs.armed, __ATOMIC_RELAXED) || gw_migrate_redirect_decode(&m, p, n, err, sizeof err) != 0 ||
        m.secret_len != sizeof rs.secret || m.address_len == 0 || m.address_len >= sizeof rs.endpoint) {
        fprintf(stderr, "gpucloud: cannot follow the session's move to another server\n");
        return -1;
    }
    snprintf(rs.endpoint, sizeof rs.endpoint, "%.*s", (int)m.address_len, m.address);
    memcpy(rs.secret, m.secret, sizeof rs.secret);
    gc_lanes_drop(); /* first: a lane failing now must not break the session */
    shutdown(gc.fd, SHUT_RDWR);
    fprintf(stderr, "gpucloud: session moving to %s\n", rs.endpoint);
    return resume_loop();
}

static int resume_loop(void) {
    uint64_t deadline = now_ms() + rs.window_ms;
    while (now_ms() < deadline) {
        int fd = gc_dial(rs.endpoint);
        if (fd >= 0) {
            struct timeval tv = {5, 0}, none = {0, 0}; /* a handshake that hangs is tried again */
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            int rc = try_resume(fd);
            if (rc == 0) {
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
                dup2(fd, gc.fd); /* the session keeps its descriptor number; the old socket goes */
                close(fd);
                /* The stream may now be served by another worker (a restored or moved session)
                 * that the lanes do not reach: they are given up, and opened again (to the
                 * worker that serves the session now) at the next large copy. */
                gc_lanes_resumed();
                fprintf(stderr, "gpucloud: session resumed\n");
                return 0;
            }
            close(fd);
            if (rc == -2) break;
        }
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "gpucloud: could not resume the session within %u ms\n", rs.window_ms);
    rs.armed = 0;
    return -1;
}

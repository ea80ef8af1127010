/* The connection to gpuserverd: configuration, handshake, framing. */
#include "transport.h"
#include "dial.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct gc_state gc = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .init_result = CUDA_ERROR_NOT_INITIALIZED};
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

int gc_dial(const char *endpoint) {
    if (gc_ivshmem_spec(endpoint)) return gc_ivshmem_open(gc_ivshmem_spec(endpoint));
    return gc_dial_socket(endpoint);
}

/* has_capability: whether the successful HelloReply's message (space-separated words) names cap. */
static int has_capability(const char *msg, uint32_t n, const char *cap) {
    size_t c = strlen(cap);
    for (uint32_t i = 0; i + c <= n; i++)
        if ((i == 0 || msg[i - 1] == ' ') && memcmp(msg + i, cap, c) == 0 && (i + c == n || msg[i + c] == ' ')) return 1;
    return 0;
}

/* tell_pid gives the worker this process's id, for the instance's process list in NVML
 * (docs/nvml.md). Its failure is a lost connection, which the next call reports. */
static void tell_pid(void) {
    struct gw_nvml_session_pid m = {.pid = (uint32_t)getpid()};
    uint8_t buf[8];
    gw_nvml_session_pid_encode(&m, buf);
    struct gc_reply r;
    pthread_mutex_lock(&gc.mu);
    gc_xfer_locked(GW_TYPE_NVML_SESSION_PID, 0, buf, gw_nvml_session_pid_size(&m), NULL, 0, GW_TYPE_STATUS, &r);
    pthread_mutex_unlock(&gc.mu);
}

static void connect_session(void) {
    char endpoints[GC_MAX_VALUE], token[GC_MAX_VALUE + 1];
    if (!gc_endpoints_setting(endpoints, sizeof endpoints) ||
        !gc_setting("GPUCLOUD_TOKEN", "token", token, sizeof token)) {
        fprintf(stderr, "gpucloud: no endpoint or token: set GPUCLOUD_ENDPOINT and GPUCLOUD_TOKEN or "
                        "write them to %s (GPUCLOUD_CONFIG)\n", GC_CONFIG_DEFAULT);
        gc.init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    /* Endpoints are tried in order, comma-separated. */
    char tried[GC_MAX_VALUE], *save = NULL, *used = NULL;
    snprintf(tried, sizeof tried, "%s", endpoints);
    for (char *ep = strtok_r(endpoints, ", \t", &save); ep && gc.fd < 0; ep = strtok_r(NULL, ", \t", &save)) {
        gc.fd = gc_dial(ep);
        used = ep;
    }
    if (gc.fd < 0) {
        fprintf(stderr, "gpucloud: cannot reach gpuserverd at %s\n", tried);
        gc.init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    /* A TCP session may resume on a new connection (resume.c); shared memory and channels not. */
    if (!gc_unix_path(used) && !gc_ivshmem_spec(used)) gc_resume_begin(used);
    struct gw_hello hello = {.version = GW_VERSION, .token = token, .token_len = (uint32_t)strlen(token)};
    uint8_t buf[GW_HEADER_SIZE + 8 + GC_MAX_VALUE + 8];
    size_t n = gw_hello_size(&hello);
    if (n > sizeof buf) {
        gc.init_result = CUDA_ERROR_INVALID_VALUE;
        return;
    }
    gw_hello_encode(&hello, buf);
    struct gc_reply r;
    pthread_mutex_lock(&gc.mu);
    CUresult rc = gc_xfer_locked(GW_TYPE_HELLO, 0, buf, n, NULL, 0, GW_TYPE_HELLO_REPLY, &r);
    gc_resume_hello_sent(GW_HEADER_SIZE + n);
    struct gw_hello_reply hr;
    char err[256];
    if (rc == CUDA_SUCCESS && gw_hello_reply_decode(&hr, r.p, r.n, err, sizeof err) != 0) {
        rc = gc_transport_error(err);
    }
    pthread_mutex_unlock(&gc.mu);
    if (rc != CUDA_SUCCESS) {
        gc.init_result = rc;
        return;
    }
    if (hr.result != 0) {
        fprintf(stderr, "gpucloud: gpuserverd refused the session: %.*s\n", (int)hr.message_len, hr.message);
        gc.init_result = (CUresult)hr.result;
        return;
    }
    gc.device_count = hr.device_count > GC_MAX_DEVICES ? GC_MAX_DEVICES : (int)hr.device_count;
    int takes_pid = has_capability(hr.message, hr.message_len, "nvml-pid");
    /* hr's strings point into the reply buffer, which LanesOpen's reply reuses: copy the id. */
    char sid[257];
    snprintf(sid, sizeof sid, "%.*s", (int)hr.session_id_len, hr.session_id);
    hr.session_id = sid;
    pthread_mutex_lock(&gc.mu);
    gc_resume_open_locked(sid);
    pthread_mutex_unlock(&gc.mu);
    /* A client on this host shares memory with its worker; lanes would only add copies. A VM's
     * ivshmem region already is the arena. */
    if (gc_ivshmem_on()) {
        if (gc_ivshmem_adopt() != 0) {
            gc.init_result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
    } else if (!(gc_unix_path(used) && gc_open_shm())) {
        gc_open_lanes(used, &hr);
    }
    if (takes_pid) tell_pid();
    gc_start_flusher();
    gc.init_result = CUDA_SUCCESS;
}

static void connect_once(void) {
    connect_session();
    /* A refused session lets its ivshmem channel go now, not at exit: another process may use it. */
    if (gc.init_result != CUDA_SUCCESS && gc_ivshmem_on()) gc_ivshmem_release();
}

CUresult gc_ensure_init(void) {
    return gc.init_result;
}

/* gc_connect opens the session once; cuInit and the calls NVIDIA's driver answers before cuInit
 * (cuDriverGetVersion) share it. */
void gc_connect(void) { pthread_once(&init_once, connect_once); }

CUresult gc_transport_error(const char *what) {
    if (!gc.broken) fprintf(stderr, "gpucloud: connection to gpuserverd lost: %s\n", what);
    gc.broken = 1;
    return CUDA_ERROR_UNKNOWN;
}

/* write_all sends with MSG_NOSIGNAL: a vanished server must give the program an error, not a
 * SIGPIPE that kills it. */
static int write_all(struct iovec *iov, int cnt) {
    if (gc_ring_on) {
        for (int i = 0; i < cnt; i++)
            if (iov[i].iov_len && gc_ring_write(iov[i].iov_base, iov[i].iov_len) != 0) return -1;
        return 0;
    }
    gc_resume_note_sent(iov, cnt); /* kept first: a resumed connection resends what was lost */
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t w = sendmsg(gc.fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return gc_resume_locked(); /* 0: the kept bytes carried the rest */
        }
        while (cnt > 0 && (size_t)w >= iov->iov_len) {
            w -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= w;
        }
    }
    return 0;
}

int gc_read_full(void *p, size_t n) { return gc_ring_on ? gc_ring_read(p, n) : gc_read_full_fd(gc.fd, p, n); }

int gc_read_full_fd(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            /* The session's own connection may resume (resume.c) and the read go on. */
            if (fd == gc.fd && gc_resume_locked() == 0) continue;
            return -1;
        }
        if (fd == gc.fd) gc_resume_note_received((size_t)r);
        c += r;
        n -= r;
    }
    return 0;
}

void gc_put_header(uint8_t *h, uint32_t len, uint16_t type, uint16_t flags, uint32_t req) {
    h[0] = len; h[1] = len >> 8; h[2] = len >> 16; h[3] = len >> 24;
    h[4] = type; h[5] = type >> 8; h[6] = flags; h[7] = flags >> 8;
    h[8] = req; h[9] = req >> 8; h[10] = req >> 16; h[11] = req >> 24;
}

CUresult gc_read_frame_locked(struct gc_reply *r) {
    uint8_t h[GW_HEADER_SIZE];
    if (gc_read_full(h, sizeof h) != 0) return gc_transport_error("reading a reply header");
    uint32_t len = gw_u32_at(h, 0);
    r->type = h[4] | h[5] << 8;
    r->flags = h[6] | h[7] << 8;
    if (len > GW_MAX_FRAME) return gc_transport_error("reply frame over the size limit");
    if (len > gc.rcap) {
        uint8_t *nb = realloc(gc.rbuf, len);
        if (!nb) return CUDA_ERROR_OUT_OF_MEMORY;
        gc.rbuf = nb;
        gc.rcap = len;
    }
    if (gc_read_full(gc.rbuf, len) != 0) return gc_transport_error("reading a reply");
    r->p = gc.rbuf;
    r->n = len;
    if (r->type == GW_TYPE_PROTOCOL_ERROR) {
        struct gw_protocol_error pe;
        char err[128];
        if (gw_protocol_error_decode(&pe, r->p, r->n, err, sizeof err) == 0)
            fprintf(stderr, "gpucloud: gpuserverd closed the session: %.*s\n", (int)pe.message_len, pe.message);
        return gc_transport_error("protocol error");
    }
    return CUDA_SUCCESS;
}

/* Small frames that expect no reply (launches, event records, async memsets) are batched and go
 * out with the next call that waits, when the batch fills, or from the flusher thread at most
 * FLUSH_DELAY_NS after the first of them: one write for many launches, and a launch never waits
 * long for its frame to leave. */
#define BATCH_CAP (64 << 10)
#define BATCH_FRAME_MAX (16 << 10)
#define FLUSH_DELAY_NS 50000
static uint8_t batch[BATCH_CAP];
static size_t batch_n;
static pthread_cond_t batch_cv = PTHREAD_COND_INITIALIZER;

static int flush_locked(const struct iovec *more, int nmore) {
    struct iovec iov[4];
    int n = 0;
    if (batch_n) iov[n++] = (struct iovec){batch, batch_n};
    for (int i = 0; i < nmore; i++)
        if (more[i].iov_len) iov[n++] = more[i];
    batch_n = 0;
    return n ? write_all(iov, n) : 0;
}

static void *flusher(void *arg) {
    (void)arg;
    pthread_mutex_lock(&gc.mu);
    for (;;) {
        while (batch_n == 0) pthread_cond_wait(&batch_cv, &gc.mu);
        pthread_mutex_unlock(&gc.mu);
        struct timespec ts = {0, FLUSH_DELAY_NS};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gc.mu);
        if (gc.broken) batch_n = 0; /* nowhere to send it; calls now fail */
        else if (batch_n && flush_locked(NULL, 0) != 0) gc_transport_error("sending queued calls");
    }
    return NULL;
}

void gc_spawn_detached(void *(*fn)(void *)) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_create(&t, &a, fn, NULL);
    pthread_attr_destroy(&a);
}

void gc_start_flusher(void) { gc_spawn_detached(flusher); }

CUresult gc_xfer_locked(uint16_t type, uint16_t flags, const uint8_t *head, size_t head_n,
                        const void *tail, size_t tail_n, uint16_t want, struct gc_reply *reply) {
    if (gc.broken || gc.fd < 0) return CUDA_ERROR_UNKNOWN;
    if (gc_trace_on()) gc_trace("send %s (%zu bytes)", gw_type_name(type), head_n + tail_n);
    uint8_t h[GW_HEADER_SIZE];
    uint32_t req = ++gc.next_req;
    size_t frame = sizeof h + head_n + tail_n;
    gc_put_header(h, (uint32_t)(head_n + tail_n), type, flags, req);
    if ((flags & GW_FLAG_NO_REPLY) && frame <= BATCH_FRAME_MAX) {
        if (batch_n + frame > BATCH_CAP && flush_locked(NULL, 0) != 0) return gc_transport_error("sending queued calls");
        if (batch_n == 0) pthread_cond_signal(&batch_cv);
        memcpy(batch + batch_n, h, sizeof h);
        memcpy(batch + batch_n + sizeof h, head, head_n);
        if (tail_n) memcpy(batch + batch_n + sizeof h + head_n, tail, tail_n);
        batch_n += frame;
        return CUDA_SUCCESS;
    }
    struct iovec iov[3] = {{h, sizeof h}, {(void *)head, head_n}, {(void *)tail, tail_n}};
    if (flush_locked(iov, 3) != 0) return gc_transport_error("sending a request");
    if ((flags & GW_FLAG_NO_REPLY) || !reply) return CUDA_SUCCESS; /* no reply, or the caller reads it */
    CUresult rc = gc_read_frame_locked(reply);
    if (rc != CUDA_SUCCESS) return rc;
    if (reply->type != want) {
        char msg[96];
        snprintf(msg, sizeof msg, "expected %s, got %s", gw_type_name(want), gw_type_name(reply->type));
        return gc_transport_error(msg);
    }
    return CUDA_SUCCESS;
}

CUresult gc_select_device_locked(int dev) {
    if (dev == gc.server_device) return CUDA_SUCCESS;
    struct gw_set_device m = {.ordinal = (uint32_t)dev};
    uint8_t b[8];
    size_t n = gw_set_device_size(&m);
    gw_set_device_encode(&m, b);
    /* Sent without waiting: a refusal surfaces at the next synchronising call. */
    CUresult rc = gc_xfer_locked(GW_TYPE_SET_DEVICE, GW_FLAG_NO_REPLY, b, n, NULL, 0, 0, NULL);
    if (rc == CUDA_SUCCESS) gc.server_device = dev;
    return rc;
}

/* The monitoring connection to gpuserverd: the guest libcuda's settings and sockets (../transport/dial.c),
 * opened with NvmlHello so that gpuserverd starts no worker and allocates no GPU for it. One
 * request at a time, under one lock. */
#include "internal.h"
#include "../transport/dial.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Every NVML reply is small: the largest is NvmlHelloReply or a ProtocolError, about 1 KiB. */
#define REPLY_MAX 8192

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static uint32_t next_req;
static uint8_t rbuf[REPLY_MAX];

static int write_all(const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void close_locked(void) {
    if (fd >= 0) close(fd);
    fd = -1;
}

/* Sends one frame and reads its reply into rbuf: the reply's type and length, or -1 after
 * closing a connection that failed. */
static int exchange(uint16_t type, const uint8_t *body, size_t n, uint16_t *rtype, uint32_t *rlen) {
    uint8_t frame[GW_HEADER_SIZE + 4200];
    if (fd < 0 || n > sizeof frame - GW_HEADER_SIZE) return -1;
    uint32_t len = (uint32_t)n, req = ++next_req;
    uint8_t *h = frame;
    h[0] = len; h[1] = len >> 8; h[2] = len >> 16; h[3] = len >> 24;
    h[4] = type; h[5] = type >> 8; h[6] = 0; h[7] = 0;
    h[8] = req; h[9] = req >> 8; h[10] = req >> 16; h[11] = req >> 24;
    memcpy(frame + GW_HEADER_SIZE, body, n);
    uint8_t rh[GW_HEADER_SIZE];
    if (write_all(frame, GW_HEADER_SIZE + n) != 0 || read_all(rh, sizeof rh) != 0) goto fail;
    *rlen = gw_u32_at(rh, 0);
    *rtype = (uint16_t)(rh[4] | rh[5] << 8);
    if (*rlen > REPLY_MAX || read_all(rbuf, *rlen) != 0) goto fail;
    return 0;
fail:
    close_locked();
    return -1;
}

/* Dials the configured endpoints in order. A VM's ivshmem channel is skipped: its slots are for
 * CUDA sessions, and gpuserverd is also reachable over TCP, the list's next entry. */
static int dial(void) {
    char endpoints[GC_MAX_VALUE];
    if (!gc_endpoints_setting(endpoints, sizeof endpoints)) return -1;
    char *save = NULL;
    for (char *ep = strtok_r(endpoints, ", \t", &save); ep; ep = strtok_r(NULL, ", \t", &save)) {
        if (gc_ivshmem_spec(ep)) continue;
        int s = gc_dial_socket(ep);
        if (s >= 0) return s;
    }
    return -1;
}

/* connect_locked opens the connection and presents the token; with sys, what the hello told. */
static nvmlReturn_t connect_locked(struct gn_system *sys) {
    char token[GC_MAX_VALUE + 1];
    if (!gc_setting("GPUCLOUD_TOKEN", "token", token, sizeof token)) {
        fprintf(stderr, "gpucloud: NVML: no token: set GPUCLOUD_ENDPOINT and GPUCLOUD_TOKEN or write them to %s\n",
                GC_CONFIG_DEFAULT);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    fd = dial();
    if (fd < 0) {
        fprintf(stderr, "gpucloud: NVML: cannot reach gpuserverd\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    struct gw_nvml_hello hello = {.version = GW_VERSION, .token = token, .token_len = (uint32_t)strlen(token)};
    uint8_t buf[GC_MAX_VALUE + 16];
    size_t n = gw_nvml_hello_size(&hello);
    if (n > sizeof buf) return NVML_ERROR_INVALID_ARGUMENT;
    gw_nvml_hello_encode(&hello, buf);
    uint16_t rtype;
    uint32_t rlen;
    struct gw_nvml_hello_reply hr;
    char err[160];
    if (exchange(GW_TYPE_NVML_HELLO, buf, n, &rtype, &rlen) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (rtype != GW_TYPE_NVML_HELLO_REPLY || gw_nvml_hello_reply_decode(&hr, rbuf, rlen, err, sizeof err) != 0) {
        fprintf(stderr, "gpucloud: NVML: gpuserverd answered the hello with %s\n", gw_type_name(rtype));
        close_locked();
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    }
    if (hr.result != NVML_SUCCESS) {
        fprintf(stderr, "gpucloud: NVML: gpuserverd refused: %.*s\n", (int)hr.message_len, hr.message);
        close_locked();
        return (nvmlReturn_t)hr.result;
    }
    if (sys) {
        snprintf(sys->tier, sizeof sys->tier, "%.*s", (int)hr.tier_len, hr.tier);
        snprintf(sys->driver_version, sizeof sys->driver_version, "%.*s", (int)hr.driver_version_len, hr.driver_version);
        sys->cuda_version = hr.cuda_version;
        sys->simulated = hr.simulated != 0;
        sys->device_count = hr.device_count > GN_MAX_DEVICES ? GN_MAX_DEVICES : hr.device_count;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t gn_open(struct gn_system *sys) {
    pthread_mutex_lock(&mu);
    nvmlReturn_t rc = fd >= 0 ? NVML_SUCCESS : connect_locked(sys);
    pthread_mutex_unlock(&mu);
    return rc;
}

void gn_close(void) {
    pthread_mutex_lock(&mu);
    close_locked();
    pthread_mutex_unlock(&mu);
}

nvmlReturn_t gn_request(uint16_t type, const uint8_t *body, size_t n, uint16_t want, void *reply) {
    pthread_mutex_lock(&mu);
    uint16_t rtype = 0;
    uint32_t rlen = 0;
    nvmlReturn_t rc = NVML_SUCCESS;
    /* A gpuserverd that restarted closed the connection: dial again, once. */
    if (exchange(type, body, n, &rtype, &rlen) != 0) {
        rc = connect_locked(NULL);
        if (rc == NVML_SUCCESS && exchange(type, body, n, &rtype, &rlen) != 0) rc = NVML_ERROR_GPU_IS_LOST;
    }
    if (rc == NVML_SUCCESS) {
        char err[160];
        if (rtype != want || gw_decode_any(want, reply, rbuf, rlen, err, sizeof err) != 0) {
            fprintf(stderr, "gpucloud: NVML: gpuserverd answered %s with %s\n", gw_type_name(type), gw_type_name(rtype));
            close_locked();
            rc = NVML_ERROR_UNKNOWN;
        } else {
            rc = (nvmlReturn_t) * (const int32_t *)reply; /* every reply starts with its result */
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

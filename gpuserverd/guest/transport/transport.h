/* The transport layer of the guest library: the one connection to gpuserverd (conn.c), lanes,
 * shared memory and its rings, ivshmem, registered host ranges and their arena pages. It moves
 * frames and bytes; it never calls up into the API files (driver/, the runtime): what it needs
 * from them comes through this interface (scripts/check-guest-layers.sh checks it). */
#ifndef GPUCLOUD_TRANSPORT_H
#define GPUCLOUD_TRANSPORT_H

#define GPUCLOUD_GUEST_IMPL
#include "../include/cuda.h"
#include "../wire_gen.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GC_MAX_DEVICES 16

/* Transport state; all traffic holds mu. */
struct gc_state {
    pthread_mutex_t mu;
    int fd;
    int broken;
    uint32_t next_req;
    CUresult init_result;
    int device_count;
    int server_device; /* the device the server's calls act on */
    uint8_t *rbuf;
    size_t rcap;
};
extern struct gc_state gc;

/* A reply frame read into gc.rbuf. */
struct gc_reply {
    uint16_t type;
    uint16_t flags;
    const uint8_t *p;
    uint32_t n;
};

CUresult gc_ensure_init(void);
void gc_connect(void);
void gc_start_flusher(void);
void gc_spawn_detached(void *(*fn)(void *)); /* a detached thread running fn(NULL) */
/* Sends a frame (head, then tail) and, unless flags has GW_FLAG_NO_REPLY, reads the reply of type
 * want. Caller holds gc.mu. */
CUresult gc_xfer_locked(uint16_t type, uint16_t flags, const uint8_t *head, size_t head_n,
                        const void *tail, size_t tail_n, uint16_t want, struct gc_reply *reply);
CUresult gc_read_frame_locked(struct gc_reply *r);
int gc_read_full(void *p, size_t n);
int gc_read_full_fd(int fd, void *p, size_t n);
int gc_dial(const char *endpoint);
void gc_put_header(uint8_t *h, uint32_t len, uint16_t type, uint16_t flags, uint32_t req);

/* resume.c: a TCP session's stream survives a dropped connection. */
struct iovec;
void gc_resume_begin(const char *endpoint);
void gc_resume_hello_sent(size_t hello_bytes);
void gc_resume_open_locked(const char *session_id);
void gc_resume_note_sent(const struct iovec *iov, int cnt);
void gc_resume_note_received(size_t n);
int gc_resume_locked(void);
const char *gc_resume_endpoint(void);
int gc_redirect_locked(const uint8_t *p, size_t n);
void gc_lanes_drop(void);
int gc_read_header_locked(uint8_t *h);
void gc_resume_disarm(void);

/* Lanes (lanes.c): extra connections that large copies are striped over. */
void gc_open_lanes(const char *endpoint, const struct gw_hello_reply *hr);
int gc_lanes(void);
void gc_lanes_reopen(void);
void gc_lanes_resumed(void);
CUresult gc_striped_locked(uint16_t type, const uint8_t *head, size_t head_n, char *p, size_t n, int read);
/* Shared memory with a worker on this host (shm.c). */
int gc_open_shm(void);
int gc_shm_on(void);
int gc_shm_attach(char *base, size_t size);
/* Registered ranges map arena blocks from fd, the arena starting at file offset off (not closed). */
void gc_shm_map_from(int fd, off_t off);
/* A VM's ivshmem region (ivshmem.c): claims the channel at spec ("auto" or a path) and starts the
 * rings over it; returns a descriptor standing for the connection, or -1 after saying why. */
int gc_ivshmem_open(const char *spec);
/* After an accepted hello: the region's data bytes become the arena. */
int gc_ivshmem_adopt(void);
int gc_ivshmem_on(void);
/* The channel's mapping behaves as uncached (a VM whose PAT the hypervisor honours): registered
 * ranges are not moved into it, where the program's own use of them would be slowed. */
int gc_ivshmem_uncached(void);
void gc_ivshmem_release(void); /* lets the channel go (a refused session) */
extern int gc_ring_on; /* frames go through the arena's rings, not the socket */
int gc_ring_write(const void *p, size_t n);
int gc_ring_read(void *p, size_t n);
/* ring.c: frames go through the arena's rings from here on; with peer_gone_poll the doorbell polls
 * (an ivshmem region) and asks it whether the server has gone, else it is a futex. */
void gc_rings_start(char *arena, int (*peer_gone_poll)(void));
void *gc_shm_alloc(size_t n);
int gc_shm_free(void *p);
CUresult gc_shm_copy_locked(int to_device, uint64_t dev, void *host, size_t n, uint64_t stream, int async);
const char *gc_shm_adopt(char *va, size_t len, uint64_t *off, int *held);
int gc_shm_release(char *va, size_t len, uint64_t off);
int gc_shm_contains(const void *p, size_t n);
int gc_shm_offset(const void *p, uint64_t *off); /* p in the arena (heap or moved range) */
char *gc_shm_alias_at(uint64_t addr);
char *gc_shm_base(void);
uint64_t gc_shm_device_address(void);
/* Write-protects [va, va+len) so that other threads' writes wait until gc_release_writes: the
 * descriptor to pass it, or -1 when this process cannot (holdwrites.c). */
int gc_hold_writes(void *va, size_t len, int shared);
void gc_release_writes(int fd);
/* Registered host ranges (hostreg.c): whether p lies in one whose pages are in the arena (then
 * *off and the contiguous *len of n), else *len = bytes before the next such range. gc.mu held. */
int gc_hostreg_span(const char *p, size_t n, uint64_t *off, size_t *len);
/* GC_T passes a public entry point's result through, logging "name -> result" with
 * GPUCLOUD_TRACE=1: local answers (devices, contexts) leave no frame to trace otherwise. */
CUresult gc_traced(const char *fn, CUresult rc);
#define GC_T(rc) gc_traced(__func__, (rc))
/* Opt-in trace (GPUCLOUD_TRACE=1, trace.c). */
int gc_trace_on(void);
void gc_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gc_format_uuid(const unsigned char b[16], char out[37]);
/* Marks the connection broken, saying why once; the error every call then returns. */
CUresult gc_transport_error(const char *what);
/* Selects dev as the server's current device (sent without waiting). Caller holds gc.mu. */
CUresult gc_select_device_locked(int dev);
/* Registered host ranges (hostreg.c; each takes gc.mu): registering a range moves its whole pages
 * into the arena when there is one; unregistering puts them back. gc_hostreg_moved says whether
 * p's registration has pages in the arena (the API waits for the device's work first). */
CUresult gc_hostreg_register(void *p, size_t n, unsigned flags);
int gc_hostreg_moved(void *p);
CUresult gc_hostreg_unregister(void *p);

#endif

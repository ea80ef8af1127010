/* Software coherence for managed and mapped host memory where there is no shared arena
 * (driver/coherence.c). */
#ifndef GPUCLOUD_COHERENCE_H
#define GPUCLOUD_COHERENCE_H

#include "guest.h"

/* GC_COH_PINNED is asked for plain pinned memory (cuMemAllocHost, cuMemHostAlloc without
 * DEVICEMAP): it becomes mapped host memory once a kernel may see it (gc_coh_promote). */
enum { GC_COH_MANAGED = 1, GC_COH_MAPPED_HOST = 2, GC_COH_PINNED = 3 };

/* gc_coh_alloc gives bytes of coherent memory of kind at *out, an address that is the device's
 * and the program's alike; charged to the device quota. CUDA_ERROR_NOT_SUPPORTED where the
 * device's addresses are taken in this process. Needs a current context. */
CUresult gc_coh_alloc(void **out, size_t bytes, int kind);
/* gc_coh_free frees p if it is coherent memory of kind (waiting for the device's work): 1 if so. */
int gc_coh_free(const void *p, int kind);
/* gc_coh_find: whether [p, p+n) lies in one coherent allocation (n 0: p does); its kind. */
int gc_coh_find(const void *p, size_t n, int *kind);
/* gc_coh_attach records the stream whose work may use the allocation holding p (a hint, but it
 * tells which work a CPU access waits for). */
CUresult gc_coh_attach(const void *p, CUstream s, unsigned flags);
/* gc_coh_before runs before a call of message type that may let the device touch memory, outside
 * gc.mu: dirty pages go to the device and the host's pages to it. A failed push is returned. */
CUresult gc_coh_before(uint16_t type);
/* gc_coh_prefault reads [p, p+n) page by page where it is coherent memory, so that a call's
 * host-side input kept there is fetched before the call takes the connection (a fault while it
 * holds it could not be served). After gc_coh_before. */
void gc_coh_prefault(const void *p, size_t n);
/* gc_coh_adopt makes the module's managed variable [p, p+n) coherent memory at its own address:
 * the device's copy is the module's, the host's a shadow there (its pages may be shared with the
 * module's other managed variables). CUDA_ERROR_NOT_SUPPORTED where the address is taken in this
 * process. Needs a current context. gc_coh_disown undoes it (the module is unloaded). */
CUresult gc_coh_adopt(CUdeviceptr p, size_t n);
void gc_coh_disown(CUdeviceptr p, size_t n);
/* gc_coh_promote: whether p lies in plain pinned memory, which from now on has a device side at
 * its own address, kept coherent as mapped host memory is (the first time: backed and marked
 * for the next hand-over). Cheap when there is no plain pinned memory. Outside gc.mu. */
int gc_coh_promote(const void *p);
/* gc_coh_promote_words calls gc_coh_promote on every 8-byte word at 8-byte offsets in [p, p+n): a launch's
 * parameters, where a pointer to pinned memory makes it the device's too. */
void gc_coh_promote_words(const void *p, size_t n);
/* gc_coh_lazy_any: whether any plain pinned memory has no device side yet (a launch's fast path). */
int gc_coh_lazy_any(void);
/* gc_coh_stream_created / _destroyed keep the non-blocking streams, whose work a CPU access to
 * mapped host memory waits a short while for (the legacy stream covers the others). */
void gc_coh_stream_created(CUstream s, unsigned flags);
void gc_coh_stream_destroyed(CUstream s);
/* gc_managed_coherent: whether managed memory on device dev goes through coherence (managed.c);
 * gc_host_native_atomics: whether dev's atomics on host memory are the CPU's (api_device.c). */
int gc_managed_coherent(int dev);
int gc_host_native_atomics(int dev);
/* gc_coh_transport: whether this session has no arena, so managed memory goes through coherence. */
int gc_coh_transport(void);

#endif

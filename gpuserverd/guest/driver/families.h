/* What the hand-written driver-API families (issue 14) share: handles as pointers, calls whose
 * replies carry data. */
#ifndef GPUCLOUD_DRIVER_FAMILIES_H
#define GPUCLOUD_DRIVER_FAMILIES_H
#include "../guest.h"

/* Server ids travel in pointer-typed handles (CUarray, CUgraph, ...); 0 is NULL. */
#define GC_PTR(type, h) ((type)(uintptr_t)(h))
#define GC_ID(p) ((uint64_t)(uintptr_t)(p))

/* One side of a 3-D copy as the wire names it (wire kinds: 1 host, 2 device, 3 array). */
struct gc_side {
    uint32_t kind;
    const char *host; /* kind 1 */
    uint64_t ptr;     /* device address or array id */
    uint64_t pitch, height, x, y, z;
};

/* Fills a side from a CUDA_MEMCPY3D's fields; unified memory resolves to device or host. */
CUresult gc_copy_side(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch, size_t height,
                      size_t x, size_t y, size_t z, struct gc_side *out);
/* Both sides of a CUDA_MEMCPY3D (array.c). */
CUresult gc_copy3d_sides(const CUDA_MEMCPY3D *c, struct gc_side *src, struct gc_side *dst);
/* A 3-D copy of w bytes x h rows x d slices between two sides (array.c). */
CUresult gc_copy3d(const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d, CUstream s,
                   int async);
/* A dependency list as the wire carries it: node ids, 8 bytes each, into buf (8 * n bytes). */
CUresult gc_deps(const CUgraphNode *deps, size_t n, uint8_t *buf, size_t cap);

/* For the calls NVIDIA's driver takes without a current context: device dev's primary context
 * made current when the thread has none (returns whether it did), and undone (driver/ipc.c). */
int gc_ctx_fallback(int dev);
void gc_ctx_restore(int pushed, int dev);

#endif

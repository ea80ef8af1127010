// The driver calls of the hand-written families (issue 14), resolved from the loaded driver on
// first use: a driver without one answers CUDA_ERROR_NOT_SUPPORTED (801) for it. Each call makes
// the context current first, as driver.h's do. Structures follow cuda.h (64-bit).
#ifndef GPUCLOUD_CUDA_FAMILIES_H
#define GPUCLOUD_CUDA_FAMILIES_H

#include "driver.h"

typedef void *CUarray;
typedef void *CUmemoryPool;
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef void *CUgraphExec;

// A side of a 3-D copy: kind 1 host (host), 2 device (ptr), 3 array (arr).
struct gc_side {
	unsigned kind;
	void *host;
	CUdeviceptr ptr;
	CUarray arr;
	size_t pitch, height, x, y, z;
};

CUresult gc_vm_reserve(CUcontext ctx, CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult gc_vm_free(CUcontext ctx, CUdeviceptr p, size_t size);
CUresult gc_vm_create(CUcontext ctx, unsigned long long *h, size_t size, unsigned type, unsigned loc_type, int loc_id,
                      unsigned handle_types, unsigned compression, unsigned long long flags);
CUresult gc_vm_release(CUcontext ctx, unsigned long long h);
CUresult gc_vm_map(CUcontext ctx, CUdeviceptr p, size_t size, size_t offset, unsigned long long h, unsigned long long flags);
CUresult gc_vm_unmap(CUcontext ctx, CUdeviceptr p, size_t size);
CUresult gc_vm_set_access(CUcontext ctx, CUdeviceptr p, size_t size, unsigned loc_type, int loc_id, unsigned flags);
CUresult gc_vm_granularity(CUcontext ctx, size_t *g, unsigned type, unsigned loc_type, int loc_id, unsigned option);
CUresult gc_vm_props(CUcontext ctx, unsigned long long h, unsigned *type, unsigned *loc_type, int *loc_id,
                     unsigned *handle_types, unsigned *compression);
CUresult gc_vm_back(CUcontext ctx, CUdeviceptr p, size_t size, int dev);
CUresult gc_vm_map_handle(CUcontext ctx, CUdeviceptr p, size_t size, unsigned long long h, int dev);
CUresult gc_module_load_pinned(CUcontext ctx, CUmodule *m, const char *ptx, size_t n, const char **names,
                               unsigned long long *addrs, unsigned count, char *log, unsigned logn);
CUresult gc_vm_retain(CUcontext ctx, unsigned long long *h, CUdeviceptr p);

CUresult gc_alloc_async(CUcontext ctx, CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s);
CUresult gc_free_async(CUcontext ctx, CUdeviceptr p, CUstream s);
CUresult gc_pool_create(CUcontext ctx, CUmemoryPool *pool, unsigned alloc_type, unsigned handle_types, unsigned loc_type,
                        int loc_id, size_t max_size);
CUresult gc_pool_destroy(CUcontext ctx, CUmemoryPool pool);
CUresult gc_pool_set(CUcontext ctx, CUmemoryPool pool, int attr, unsigned long long v);
CUresult gc_pool_get(CUcontext ctx, CUmemoryPool pool, int attr, unsigned long long *v);
CUresult gc_pool_trim(CUcontext ctx, CUmemoryPool pool, size_t keep);
CUresult gc_device_pool(CUcontext ctx, CUmemoryPool *pool, CUdevice dev, int default_pool);
CUresult gc_device_set_pool(CUcontext ctx, CUdevice dev, CUmemoryPool pool);

CUresult gc_array_create(CUcontext ctx, CUarray *a, size_t w, size_t h, size_t d, unsigned format, unsigned channels,
                         unsigned flags);
CUresult gc_array_destroy(CUcontext ctx, CUarray a);
CUresult gc_array_desc(CUcontext ctx, CUarray a, size_t *w, size_t *h, size_t *d, unsigned *format, unsigned *channels,
                       unsigned *flags);
CUresult gc_copy3d(CUcontext ctx, const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d,
                   CUstream s, int async);

CUresult gc_tex_create(CUcontext ctx, unsigned long long *obj, unsigned res_type, CUdeviceptr ptr, CUarray arr,
                       unsigned format, unsigned channels, size_t w, size_t h, size_t pitch, size_t size,
                       unsigned res_flags, const void *tex, size_t tex_n, const void *view, size_t view_n);
CUresult gc_tex_destroy(CUcontext ctx, unsigned long long obj);
CUresult gc_tex_resource(CUcontext ctx, unsigned long long obj, unsigned *res_type, CUdeviceptr *ptr, CUarray *arr,
                         unsigned *format, unsigned *channels, size_t *w, size_t *h, size_t *pitch, size_t *size,
                         unsigned *res_flags);
CUresult gc_surf_create(CUcontext ctx, unsigned long long *obj, CUarray arr);
CUresult gc_surf_destroy(CUcontext ctx, unsigned long long obj);

CUresult gc_capture_begin(CUcontext ctx, CUstream s, unsigned mode);
CUresult gc_capture_end(CUcontext ctx, CUstream s, CUgraph *g);
CUresult gc_capture_info(CUcontext ctx, CUstream s, unsigned *status, unsigned long long *id);
CUresult gc_graph_create(CUcontext ctx, CUgraph *g, unsigned flags);
CUresult gc_graph_destroy(CUcontext ctx, CUgraph g);
CUresult gc_graph_kernel(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUfunction f,
                         const unsigned dims[7], void *params, size_t size);
CUresult gc_graph_memset(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUdeviceptr dst,
                         size_t pitch, unsigned value, unsigned elem, size_t w, size_t h);
CUresult gc_graph_memcpy(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps,
                         const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d);
CUresult gc_graph_empty(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps);
CUresult gc_graph_nodes(CUcontext ctx, CUgraph g, CUgraphNode *nodes, size_t *count);
CUresult gc_graph_node_type(CUcontext ctx, CUgraphNode n, unsigned *type);
CUresult gc_graph_instantiate(CUcontext ctx, CUgraphExec *x, CUgraph g, unsigned long long flags);
CUresult gc_graph_launch(CUcontext ctx, CUgraphExec x, CUstream s);
CUresult gc_graph_exec_destroy(CUcontext ctx, CUgraphExec x);
CUresult gc_graph_exec_update(CUcontext ctx, CUgraphExec x, CUgraph g, unsigned *result);
// cuGraphExec{Kernel,Memset,Memcpy}NodeSetParams, with the parameters of the matching add calls.
CUresult gc_exec_kernel(CUcontext ctx, CUgraphExec x, CUgraphNode n, CUfunction f, const unsigned dims[7], void *params,
                        size_t size);
CUresult gc_exec_memset(CUcontext ctx, CUgraphExec x, CUgraphNode n, CUdeviceptr dst, size_t pitch, unsigned value,
                        unsigned elem, size_t w, size_t h);
CUresult gc_exec_memcpy(CUcontext ctx, CUgraphExec x, CUgraphNode n, const struct gc_side *src, const struct gc_side *dst,
                        size_t w, size_t h, size_t d);

CUresult gc_launch_ex(CUcontext ctx, CUfunction f, const unsigned dims[7], CUstream s, int cooperative,
                      const unsigned cluster[3], int priority, void *params, size_t size);

// op: 1 wait 32-bit, 2 write 32-bit, 3 wait 64-bit, 4 write 64-bit.
CUresult gc_stream_mem_op(CUcontext ctx, CUstream s, unsigned op, CUdeviceptr addr, unsigned long long v, unsigned flags);

// Hopper tensor maps: cuTensorMapEncodeTiled (im2col 0) or cuTensorMapEncodeIm2col into map (128 bytes).
CUresult gc_tensor_map(CUcontext ctx, void *map, int im2col, unsigned dtype, unsigned rank, CUdeviceptr addr,
                       const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,
                       const unsigned *estrides, const int *lower, const int *upper, unsigned cpp, unsigned ppc,
                       unsigned interleave, unsigned swizzle, unsigned l2, unsigned oob);

CUresult gc_link_create(CUcontext ctx, void **state);
CUresult gc_link_add(CUcontext ctx, void *state, int type, void *data, size_t n, const char *name);
CUresult gc_link_complete(CUcontext ctx, void *state, void **image, size_t *n);
CUresult gc_link_destroy(CUcontext ctx, void *state);

#endif

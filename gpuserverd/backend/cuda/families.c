// The hand-written families' driver calls (families.h): a table resolved from the loaded driver
// on first use, and thin wrappers that build the driver's structures.
#include "families.h"

#include "dl.h"

#include <pthread.h>
#include <string.h>

void *gc_driver_lib(void);

#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define NOT_SUPPORTED 801

// cuda.h's structures, as far as these calls use them.
struct loc { int type, id; };
struct alloc_prop {
	int type, handle_types;
	struct loc location;
	void *win32;
	unsigned char compression, rdma;
	unsigned short usage;
	unsigned char reserved[4];
};
struct access_desc { struct loc location; int flags; };
struct pool_props {
	int alloc_type, handle_types;
	struct loc location;
	void *win32;
	size_t max_size;
	unsigned short usage;
	unsigned char reserved[54];
};
struct array3d_desc { size_t w, h, d; int format; unsigned channels, flags; };
struct memcpy3d {
	size_t src_x, src_y, src_z, src_lod;
	int src_type;
	const void *src_host;
	CUdeviceptr src_dev;
	CUarray src_arr;
	void *reserved0;
	size_t src_pitch, src_height;
	size_t dst_x, dst_y, dst_z, dst_lod;
	int dst_type;
	void *dst_host;
	CUdeviceptr dst_dev;
	CUarray dst_arr;
	void *reserved1;
	size_t dst_pitch, dst_height;
	size_t w, h, d;
};
struct resource_desc {
	int type;
	union {
		struct { CUarray arr; } array;
		struct { CUdeviceptr ptr; int format; unsigned channels; size_t size; } linear;
		struct { CUdeviceptr ptr; int format; unsigned channels; size_t w, h, pitch; } pitch2d;
		int reserved[32];
	} res;
	unsigned flags;
};
struct kernel_node {
	CUfunction f;
	unsigned gx, gy, gz, bx, by, bz, shared;
	void **params, **extra;
	void *kern;
	CUcontext ctx;
};
struct memset_node { CUdeviceptr dst; size_t pitch; unsigned value, elem; size_t w, h; };
struct update_info { int result; CUgraphNode error_node, error_from; };
struct launch_attr { int id; char pad[4]; union { char pad[64]; int i; unsigned dim[3]; } v; };
struct launch_config {
	unsigned gx, gy, gz, bx, by, bz, shared;
	CUstream s;
	struct launch_attr *attrs;
	unsigned nattrs;
};

#define FAMILY_SYMBOLS(X)                                                                              \
	X(reserve, "cuMemAddressReserve", CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
	X(addr_free, "cuMemAddressFree", CUresult (*)(CUdeviceptr, size_t))                                \
	X(create, "cuMemCreate", CUresult (*)(unsigned long long *, size_t, const struct alloc_prop *, unsigned long long)) \
	X(release, "cuMemRelease", CUresult (*)(unsigned long long))                                       \
	X(map, "cuMemMap", CUresult (*)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long)) \
	X(unmap, "cuMemUnmap", CUresult (*)(CUdeviceptr, size_t))                                          \
	X(set_access, "cuMemSetAccess", CUresult (*)(CUdeviceptr, size_t, const struct access_desc *, size_t)) \
	X(granularity, "cuMemGetAllocationGranularity", CUresult (*)(size_t *, const struct alloc_prop *, int)) \
	X(props, "cuMemGetAllocationPropertiesFromHandle", CUresult (*)(struct alloc_prop *, unsigned long long)) \
	X(retain, "cuMemRetainAllocationHandle", CUresult (*)(unsigned long long *, void *))              \
	X(alloc_pool, "cuMemAllocFromPoolAsync", CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
	X(alloc_async, "cuMemAllocAsync", CUresult (*)(CUdeviceptr *, size_t, CUstream))                   \
	X(free_async, "cuMemFreeAsync", CUresult (*)(CUdeviceptr, CUstream))                              \
	X(pool_create, "cuMemPoolCreate", CUresult (*)(CUmemoryPool *, const struct pool_props *))         \
	X(pool_destroy, "cuMemPoolDestroy", CUresult (*)(CUmemoryPool))                                    \
	X(pool_set, "cuMemPoolSetAttribute", CUresult (*)(CUmemoryPool, int, void *))                      \
	X(pool_get, "cuMemPoolGetAttribute", CUresult (*)(CUmemoryPool, int, void *))                      \
	X(pool_trim, "cuMemPoolTrimTo", CUresult (*)(CUmemoryPool, size_t))                                \
	X(default_pool, "cuDeviceGetDefaultMemPool", CUresult (*)(CUmemoryPool *, CUdevice))               \
	X(get_pool, "cuDeviceGetMemPool", CUresult (*)(CUmemoryPool *, CUdevice))                          \
	X(set_pool, "cuDeviceSetMemPool", CUresult (*)(CUdevice, CUmemoryPool))                            \
	X(array_create, "cuArray3DCreate_v2", CUresult (*)(CUarray *, const struct array3d_desc *))        \
	X(array_destroy, "cuArrayDestroy", CUresult (*)(CUarray))                                          \
	X(array_desc, "cuArray3DGetDescriptor_v2", CUresult (*)(struct array3d_desc *, CUarray))           \
	X(copy3d, "cuMemcpy3D_v2", CUresult (*)(const struct memcpy3d *))                                  \
	X(copy3d_async, "cuMemcpy3DAsync_v2", CUresult (*)(const struct memcpy3d *, CUstream))             \
	X(stream_sync, "cuStreamSynchronize", CUresult (*)(CUstream))                                      \
	X(tex_create, "cuTexObjectCreate",                                                                 \
	  CUresult (*)(unsigned long long *, const struct resource_desc *, const void *, const void *))   \
	X(tex_destroy, "cuTexObjectDestroy", CUresult (*)(unsigned long long))                             \
	X(tex_resource, "cuTexObjectGetResourceDesc", CUresult (*)(struct resource_desc *, unsigned long long)) \
	X(surf_create, "cuSurfObjectCreate", CUresult (*)(unsigned long long *, const struct resource_desc *)) \
	X(surf_destroy, "cuSurfObjectDestroy", CUresult (*)(unsigned long long))                           \
	X(begin_capture, "cuStreamBeginCapture_v2", CUresult (*)(CUstream, int))                           \
	X(end_capture, "cuStreamEndCapture", CUresult (*)(CUstream, CUgraph *))                            \
	X(capture_info, "cuStreamGetCaptureInfo", CUresult (*)(CUstream, int *, unsigned long long *))     \
	X(graph_create, "cuGraphCreate", CUresult (*)(CUgraph *, unsigned))                                \
	X(graph_destroy, "cuGraphDestroy", CUresult (*)(CUgraph))                                          \
	X(add_kernel, "cuGraphAddKernelNode_v2",                                                           \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const struct kernel_node *))   \
	X(add_memset, "cuGraphAddMemsetNode",                                                              \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const struct memset_node *, CUcontext)) \
	X(add_memcpy, "cuGraphAddMemcpyNode",                                                              \
	  CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const struct memcpy3d *, CUcontext)) \
	X(add_empty, "cuGraphAddEmptyNode", CUresult (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t)) \
	X(get_nodes, "cuGraphGetNodes", CUresult (*)(CUgraph, CUgraphNode *, size_t *))                    \
	X(node_type, "cuGraphNodeGetType", CUresult (*)(CUgraphNode, int *))                               \
	X(instantiate, "cuGraphInstantiateWithFlags", CUresult (*)(CUgraphExec *, CUgraph, unsigned long long)) \
	X(graph_launch, "cuGraphLaunch", CUresult (*)(CUgraphExec, CUstream))                              \
	X(exec_destroy, "cuGraphExecDestroy", CUresult (*)(CUgraphExec))                                   \
	X(exec_update, "cuGraphExecUpdate_v2", CUresult (*)(CUgraphExec, CUgraph, struct update_info *))  \
	X(exec_kernel, "cuGraphExecKernelNodeSetParams_v2",                                               \
	  CUresult (*)(CUgraphExec, CUgraphNode, const struct kernel_node *))                            \
	X(exec_memset, "cuGraphExecMemsetNodeSetParams",                                                  \
	  CUresult (*)(CUgraphExec, CUgraphNode, const struct memset_node *, CUcontext))                  \
	X(exec_memcpy, "cuGraphExecMemcpyNodeSetParams",                                                  \
	  CUresult (*)(CUgraphExec, CUgraphNode, const struct memcpy3d *, CUcontext))                     \
	X(launch_ex, "cuLaunchKernelEx", CUresult (*)(const struct launch_config *, CUfunction, void **, void **)) \
	X(wait32, "cuStreamWaitValue32_v2", CUresult (*)(CUstream, CUdeviceptr, unsigned, unsigned))       \
	X(write32, "cuStreamWriteValue32_v2", CUresult (*)(CUstream, CUdeviceptr, unsigned, unsigned))     \
	X(wait64, "cuStreamWaitValue64_v2", CUresult (*)(CUstream, CUdeviceptr, unsigned long long, unsigned)) \
	X(write64, "cuStreamWriteValue64_v2", CUresult (*)(CUstream, CUdeviceptr, unsigned long long, unsigned)) \
	X(link_create, "cuLinkCreate_v2", CUresult (*)(unsigned, void *, void **, void **))                \
	X(link_add, "cuLinkAddData_v2",                                                                    \
	  CUresult (*)(void *, int, void *, size_t, const char *, unsigned, void *, void **))             \
	X(link_complete, "cuLinkComplete", CUresult (*)(void *, void **, size_t *))                        \
	X(link_destroy, "cuLinkDestroy", CUresult (*)(void *))                                             \
	X(load_ex, "cuModuleLoadDataEx", CUresult (*)(CUmodule *, const void *, unsigned, int *, void **)) \
	X(tmap_tiled, "cuTensorMapEncodeTiled",                                                           \
	  CUresult (*)(void *, int, unsigned, void *, const unsigned long long *, const unsigned long long *, \
	               const unsigned *, const unsigned *, int, int, int, int))                         \
	X(tmap_im2col, "cuTensorMapEncodeIm2col",                                                         \
	  CUresult (*)(void *, int, unsigned, void *, const unsigned long long *, const unsigned long long *, \
	               const int *, const int *, unsigned, unsigned, const unsigned *, int, int, int, int))

GC_DL_OPTIONAL_TABLE(f, FAMILY_SYMBOLS)

// CALL makes ctx current and calls the driver's fn, or answers NOT_SUPPORTED without it.
#define CALL(ctx, fn, ...)              \
	do {                                \
		GC_DL_BIND(f, ctx, fn);         \
		return f.fn(__VA_ARGS__);       \
	} while (0)

static struct alloc_prop prop(unsigned type, unsigned loc_type, int loc_id, unsigned handle_types) {
	struct alloc_prop p;
	memset(&p, 0, sizeof p);
	p.type = (int)type, p.location.type = (int)loc_type, p.location.id = loc_id, p.handle_types = (int)handle_types;
	return p;
}

CUresult gc_vm_reserve(CUcontext ctx, CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
	CALL(ctx, reserve, p, size, align, addr, flags);
}
CUresult gc_vm_free(CUcontext ctx, CUdeviceptr p, size_t size) { CALL(ctx, addr_free, p, size); }
CUresult gc_vm_create(CUcontext ctx, unsigned long long *h, size_t size, unsigned type, unsigned loc_type, int loc_id,
                      unsigned handle_types, unsigned compression, unsigned long long flags) {
	struct alloc_prop p = prop(type, loc_type, loc_id, handle_types);
	p.compression = (unsigned char)compression;
	CALL(ctx, create, h, size, &p, flags);
}
CUresult gc_vm_release(CUcontext ctx, unsigned long long h) { CALL(ctx, release, h); }
CUresult gc_vm_map(CUcontext ctx, CUdeviceptr p, size_t size, size_t offset, unsigned long long h, unsigned long long flags) {
	CALL(ctx, map, p, size, offset, h, flags);
}
CUresult gc_vm_unmap(CUcontext ctx, CUdeviceptr p, size_t size) { CALL(ctx, unmap, p, size); }
CUresult gc_vm_set_access(CUcontext ctx, CUdeviceptr p, size_t size, unsigned loc_type, int loc_id, unsigned flags) {
	struct access_desc a = {{(int)loc_type, loc_id}, (int)flags};
	CALL(ctx, set_access, p, size, &a, 1);
}
CUresult gc_vm_granularity(CUcontext ctx, size_t *g, unsigned type, unsigned loc_type, int loc_id, unsigned option) {
	struct alloc_prop p = prop(type, loc_type, loc_id, 0);
	CALL(ctx, granularity, g, &p, (int)option);
}
/* gc_vm_back backs [p, p+size) with device memory of dev in one call: create, map, grant read and
 * write, then drop the handle (the mapping keeps the memory; cuMemUnmap frees it). The session's
 * allocations go through it (vaspace.go). The memory is made exportable as a POSIX file descriptor
 * (another worker on the same GPU takes a migrating session's memory over that way: handover.go),
 * or, where the driver refuses that, plain. */
CUresult gc_vm_back(CUcontext ctx, CUdeviceptr p, size_t size, int dev) {
	pthread_once(&f_once, f_resolve);
	if (f.create == NULL || f.map == NULL || f.set_access == NULL || f.release == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	if (r != 0) return r;
	struct alloc_prop pr = prop(1 /* PINNED */, 1 /* DEVICE */, dev, 1 /* POSIX_FILE_DESCRIPTOR */);
	unsigned long long h;
	if ((r = f.create(&h, size, &pr, 0)) != 0) {
		pr.handle_types = 0;
		if ((r = f.create(&h, size, &pr, 0)) != 0) return r;
	}
	return gc_vm_map_handle(ctx, p, size, h, dev);
}

/* gc_vm_map_handle maps the physical memory h at [p, p+size) for dev's read and write, then drops
 * the handle (the mapping keeps the memory), or on failure undoes what it did and drops it. */
CUresult gc_vm_map_handle(CUcontext ctx, CUdeviceptr p, size_t size, unsigned long long h, int dev) {
	pthread_once(&f_once, f_resolve);
	if (f.map == NULL || f.set_access == NULL || f.release == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	if (r != 0) {
		f.release(h);
		return r;
	}
	if ((r = f.map(p, size, 0, h, 0)) != 0) {
		f.release(h);
		return r;
	}
	struct access_desc a = {{1, dev}, 3 /* READWRITE */};
	if ((r = f.set_access(p, size, &a, 1)) != 0) {
		f.unmap(p, size);
		f.release(h);
		return r;
	}
	return f.release(h);
}

static CUresult vm_props(unsigned long long h, struct alloc_prop *p) { return f.props(p, h); }
CUresult gc_vm_props(CUcontext ctx, unsigned long long h, unsigned *type, unsigned *loc_type, int *loc_id,
                     unsigned *handle_types, unsigned *compression) {
	pthread_once(&f_once, f_resolve);
	if (f.props == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	struct alloc_prop p;
	memset(&p, 0, sizeof p);
	if (r == 0) r = vm_props(h, &p);
	*type = (unsigned)p.type, *loc_type = (unsigned)p.location.type, *loc_id = p.location.id;
	*handle_types = (unsigned)p.handle_types;
	*compression = p.compression;
	return r;
}
CUresult gc_vm_retain(CUcontext ctx, unsigned long long *h, CUdeviceptr p) { CALL(ctx, retain, h, (void *)(uintptr_t)p); }

CUresult gc_alloc_async(CUcontext ctx, CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s) {
	if (pool == NULL) CALL(ctx, alloc_async, p, bytes, s);
	CALL(ctx, alloc_pool, p, bytes, pool, s);
}
CUresult gc_free_async(CUcontext ctx, CUdeviceptr p, CUstream s) { CALL(ctx, free_async, p, s); }
CUresult gc_pool_create(CUcontext ctx, CUmemoryPool *pool, unsigned alloc_type, unsigned handle_types, unsigned loc_type,
                        int loc_id, size_t max_size) {
	struct pool_props pp;
	memset(&pp, 0, sizeof pp);
	pp.alloc_type = (int)alloc_type, pp.handle_types = (int)handle_types;
	pp.location.type = (int)loc_type, pp.location.id = loc_id, pp.max_size = max_size;
	CALL(ctx, pool_create, pool, &pp);
}
CUresult gc_pool_destroy(CUcontext ctx, CUmemoryPool pool) { CALL(ctx, pool_destroy, pool); }
// The reuse attributes (1-3) are ints, the others 64-bit.
CUresult gc_pool_set(CUcontext ctx, CUmemoryPool pool, int attr, unsigned long long v) {
	int i = (int)v;
	void *p = attr <= 3 ? (void *)&i : (void *)&v;
	CALL(ctx, pool_set, pool, attr, p);
}
static CUresult pool_get(CUmemoryPool pool, int attr, unsigned long long *v) {
	int i = 0;
	*v = 0;
	CUresult r = f.pool_get(pool, attr, attr <= 3 ? (void *)&i : (void *)v);
	if (attr <= 3) *v = (unsigned long long)i;
	return r;
}
CUresult gc_pool_get(CUcontext ctx, CUmemoryPool pool, int attr, unsigned long long *v) {
	pthread_once(&f_once, f_resolve);
	if (f.pool_get == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	return r != 0 ? r : pool_get(pool, attr, v);
}
CUresult gc_pool_trim(CUcontext ctx, CUmemoryPool pool, size_t keep) { CALL(ctx, pool_trim, pool, keep); }
CUresult gc_device_pool(CUcontext ctx, CUmemoryPool *pool, CUdevice dev, int default_pool) {
	if (default_pool) CALL(ctx, default_pool, pool, dev);
	CALL(ctx, get_pool, pool, dev);
}
CUresult gc_device_set_pool(CUcontext ctx, CUdevice dev, CUmemoryPool pool) { CALL(ctx, set_pool, dev, pool); }

CUresult gc_array_create(CUcontext ctx, CUarray *a, size_t w, size_t h, size_t d, unsigned format, unsigned channels,
                         unsigned flags) {
	struct array3d_desc ad = {w, h, d, (int)format, channels, flags};
	CALL(ctx, array_create, a, &ad);
}
CUresult gc_array_destroy(CUcontext ctx, CUarray a) { CALL(ctx, array_destroy, a); }
CUresult gc_array_desc(CUcontext ctx, CUarray a, size_t *w, size_t *h, size_t *d, unsigned *format, unsigned *channels,
                       unsigned *flags) {
	pthread_once(&f_once, f_resolve);
	if (f.array_desc == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	struct array3d_desc ad;
	memset(&ad, 0, sizeof ad);
	if (r == 0) r = f.array_desc(&ad, a);
	*w = ad.w, *h = ad.h, *d = ad.d, *format = (unsigned)ad.format, *channels = ad.channels, *flags = ad.flags;
	return r;
}

static struct memcpy3d copy_desc(const struct gc_side *s, const struct gc_side *t, size_t w, size_t h, size_t d) {
	struct memcpy3d c;
	memset(&c, 0, sizeof c);
	c.src_x = s->x, c.src_y = s->y, c.src_z = s->z, c.src_type = (int)s->kind, c.src_host = s->host;
	c.src_dev = s->ptr, c.src_arr = s->arr, c.src_pitch = s->pitch, c.src_height = s->height;
	c.dst_x = t->x, c.dst_y = t->y, c.dst_z = t->z, c.dst_type = (int)t->kind, c.dst_host = t->host;
	c.dst_dev = t->ptr, c.dst_arr = t->arr, c.dst_pitch = t->pitch, c.dst_height = t->height;
	c.w = w, c.h = h, c.d = d;
	return c;
}

// Copies with the host are done before returning (the host buffer is the worker's, reused next).
static CUresult copy(const struct memcpy3d *c, CUstream s, int wait) {
	CUresult r = f.copy3d_async(c, s);
	if (r == 0 && wait) r = f.stream_sync(s);
	return r;
}
CUresult gc_copy3d(CUcontext ctx, const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d,
                   CUstream s, int async) {
	struct memcpy3d c = copy_desc(src, dst, w, h, d);
	int wait = !async || src->kind == 1 || dst->kind == 1;
	pthread_once(&f_once, f_resolve);
	if (f.copy3d_async == NULL || f.stream_sync == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	return r != 0 ? r : copy(&c, s, wait);
}

static struct resource_desc resource(unsigned type, CUdeviceptr ptr, CUarray arr, unsigned format, unsigned channels,
                                     size_t w, size_t h, size_t pitch, size_t size, unsigned flags) {
	struct resource_desc r;
	memset(&r, 0, sizeof r);
	r.type = (int)type, r.flags = flags;
	if (type == 0) r.res.array.arr = arr;
	else if (type == 2) r.res.linear.ptr = ptr, r.res.linear.format = (int)format, r.res.linear.channels = channels, r.res.linear.size = size;
	else r.res.pitch2d.ptr = ptr, r.res.pitch2d.format = (int)format, r.res.pitch2d.channels = channels,
	     r.res.pitch2d.w = w, r.res.pitch2d.h = h, r.res.pitch2d.pitch = pitch;
	return r;
}
CUresult gc_tex_create(CUcontext ctx, unsigned long long *obj, unsigned res_type, CUdeviceptr ptr, CUarray arr,
                       unsigned format, unsigned channels, size_t w, size_t h, size_t pitch, size_t size,
                       unsigned res_flags, const void *tex, size_t tex_n, const void *view, size_t view_n) {
	// Copied into buffers the size of the driver's structures (104 and 112 bytes).
	unsigned char td[104], vd[112];
	if (tex_n != sizeof td || (view_n != 0 && view_n != sizeof vd)) return 1;
	memcpy(td, tex, sizeof td);
	if (view_n) memcpy(vd, view, sizeof vd);
	struct resource_desc r = resource(res_type, ptr, arr, format, channels, w, h, pitch, size, res_flags);
	CALL(ctx, tex_create, obj, &r, td, view_n ? vd : NULL);
}
CUresult gc_tex_destroy(CUcontext ctx, unsigned long long obj) { CALL(ctx, tex_destroy, obj); }
CUresult gc_tex_resource(CUcontext ctx, unsigned long long obj, unsigned *res_type, CUdeviceptr *ptr, CUarray *arr,
                         unsigned *format, unsigned *channels, size_t *w, size_t *h, size_t *pitch, size_t *size,
                         unsigned *res_flags) {
	pthread_once(&f_once, f_resolve);
	if (f.tex_resource == NULL) return NOT_SUPPORTED;
	CUresult e = gc_bind(ctx);
	struct resource_desc r;
	memset(&r, 0, sizeof r);
	if (e == 0) e = f.tex_resource(&r, obj);
	*res_type = (unsigned)r.type, *res_flags = r.flags, *arr = NULL, *ptr = 0;
	*format = *channels = 0, *w = *h = *pitch = *size = 0;
	if (r.type == 0) *arr = r.res.array.arr;
	else if (r.type == 2) *ptr = r.res.linear.ptr, *format = (unsigned)r.res.linear.format,
	     *channels = r.res.linear.channels, *size = r.res.linear.size;
	else if (r.type == 3) *ptr = r.res.pitch2d.ptr, *format = (unsigned)r.res.pitch2d.format,
	     *channels = r.res.pitch2d.channels, *w = r.res.pitch2d.w, *h = r.res.pitch2d.h, *pitch = r.res.pitch2d.pitch;
	return e;
}
CUresult gc_surf_create(CUcontext ctx, unsigned long long *obj, CUarray arr) {
	struct resource_desc r = resource(0, 0, arr, 0, 0, 0, 0, 0, 0, 0);
	CALL(ctx, surf_create, obj, &r);
}
CUresult gc_surf_destroy(CUcontext ctx, unsigned long long obj) { CALL(ctx, surf_destroy, obj); }

CUresult gc_capture_begin(CUcontext ctx, CUstream s, unsigned mode) { CALL(ctx, begin_capture, s, (int)mode); }
CUresult gc_capture_end(CUcontext ctx, CUstream s, CUgraph *g) { CALL(ctx, end_capture, s, g); }
CUresult gc_capture_info(CUcontext ctx, CUstream s, unsigned *status, unsigned long long *id) {
	CALL(ctx, capture_info, s, (int *)status, id);
}
CUresult gc_graph_create(CUcontext ctx, CUgraph *g, unsigned flags) { CALL(ctx, graph_create, g, flags); }
CUresult gc_graph_destroy(CUcontext ctx, CUgraph g) { CALL(ctx, graph_destroy, g); }
CUresult gc_graph_kernel(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUfunction fn,
                         const unsigned dm[7], void *params, size_t size) {
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	struct kernel_node k = {fn, dm[0], dm[1], dm[2], dm[3], dm[4], dm[5], dm[6], NULL, size ? extra : NULL, NULL, NULL};
	CALL(ctx, add_kernel, n, g, deps, ndeps, &k);
}
CUresult gc_graph_memset(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps, CUdeviceptr dst,
                         size_t pitch, unsigned value, unsigned elem, size_t w, size_t h) {
	struct memset_node m = {dst, pitch, value, elem, w, h};
	CALL(ctx, add_memset, n, g, deps, ndeps, &m, ctx);
}
CUresult gc_graph_memcpy(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps,
                         const struct gc_side *src, const struct gc_side *dst, size_t w, size_t h, size_t d) {
	struct memcpy3d c = copy_desc(src, dst, w, h, d);
	CALL(ctx, add_memcpy, n, g, deps, ndeps, &c, ctx);
}
CUresult gc_graph_empty(CUcontext ctx, CUgraphNode *n, CUgraph g, CUgraphNode *deps, size_t ndeps) {
	CALL(ctx, add_empty, n, g, deps, ndeps);
}
CUresult gc_graph_nodes(CUcontext ctx, CUgraph g, CUgraphNode *nodes, size_t *count) { CALL(ctx, get_nodes, g, nodes, count); }
CUresult gc_graph_node_type(CUcontext ctx, CUgraphNode n, unsigned *type) { CALL(ctx, node_type, n, (int *)type); }
CUresult gc_graph_instantiate(CUcontext ctx, CUgraphExec *x, CUgraph g, unsigned long long flags) {
	CALL(ctx, instantiate, x, g, flags);
}
CUresult gc_exec_kernel(CUcontext ctx, CUgraphExec x, CUgraphNode n, CUfunction fn, const unsigned dm[7], void *params,
                        size_t size) {
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	struct kernel_node k = {fn, dm[0], dm[1], dm[2], dm[3], dm[4], dm[5], dm[6], NULL, size ? extra : NULL, NULL, NULL};
	CALL(ctx, exec_kernel, x, n, &k);
}
CUresult gc_exec_memset(CUcontext ctx, CUgraphExec x, CUgraphNode n, CUdeviceptr dst, size_t pitch, unsigned value,
                        unsigned elem, size_t w, size_t h) {
	struct memset_node m = {dst, pitch, value, elem, w, h};
	CALL(ctx, exec_memset, x, n, &m, ctx);
}
CUresult gc_exec_memcpy(CUcontext ctx, CUgraphExec x, CUgraphNode n, const struct gc_side *src, const struct gc_side *dst,
                        size_t w, size_t h, size_t d) {
	struct memcpy3d c = copy_desc(src, dst, w, h, d);
	CALL(ctx, exec_memcpy, x, n, &c, ctx);
}
CUresult gc_graph_launch(CUcontext ctx, CUgraphExec x, CUstream s) { CALL(ctx, graph_launch, x, s); }
CUresult gc_graph_exec_destroy(CUcontext ctx, CUgraphExec x) { CALL(ctx, exec_destroy, x); }
static CUresult exec_update(CUgraphExec x, CUgraph g, unsigned *result) {
	struct update_info info;
	memset(&info, 0, sizeof info);
	CUresult r = f.exec_update(x, g, &info);
	*result = (unsigned)info.result;
	return r;
}
CUresult gc_graph_exec_update(CUcontext ctx, CUgraphExec x, CUgraph g, unsigned *result) {
	pthread_once(&f_once, f_resolve);
	if (f.exec_update == NULL) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	return r != 0 ? r : exec_update(x, g, result);
}

CUresult gc_launch_ex(CUcontext ctx, CUfunction fn, const unsigned dm[7], CUstream s, int cooperative,
                      const unsigned cluster[3], int priority, void *params, size_t size) {
	struct launch_attr attrs[3];
	memset(attrs, 0, sizeof attrs);
	unsigned n = 0;
	if (cooperative) attrs[n].id = 2, attrs[n++].v.i = 1;
	if (cluster[0] || cluster[1] || cluster[2]) {
		attrs[n].id = 4;
		memcpy(attrs[n++].v.dim, cluster, 3 * sizeof(unsigned));
	}
	if (priority) attrs[n].id = 8, attrs[n++].v.i = priority;
	struct launch_config c = {dm[0], dm[1], dm[2], dm[3], dm[4], dm[5], dm[6], s, attrs, n};
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	CALL(ctx, launch_ex, &c, fn, NULL, size ? extra : NULL);
}

CUresult gc_stream_mem_op(CUcontext ctx, CUstream s, unsigned op, CUdeviceptr addr, unsigned long long v, unsigned flags) {
	switch (op) {
	case 1: CALL(ctx, wait32, s, addr, (unsigned)v, flags);
	case 2: CALL(ctx, write32, s, addr, (unsigned)v, flags);
	case 3: CALL(ctx, wait64, s, addr, v, flags);
	case 4: CALL(ctx, write64, s, addr, v, flags);
	}
	return 1; // CUDA_ERROR_INVALID_VALUE
}

// map is the 128-byte CUtensorMap (64-byte aligned by the caller's allocation).
CUresult gc_tensor_map(CUcontext ctx, void *map, int im2col, unsigned dtype, unsigned rank, CUdeviceptr addr,
                       const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,
                       const unsigned *estrides, const int *lower, const int *upper, unsigned cpp, unsigned ppc,
                       unsigned interleave, unsigned swizzle, unsigned l2, unsigned oob) {
	void *a = (void *)(uintptr_t)addr;
	if (im2col)
		CALL(ctx, tmap_im2col, map, (int)dtype, rank, a, dims, strides, lower, upper, cpp, ppc, estrides, (int)interleave,
		     (int)swizzle, (int)l2, (int)oob);
	CALL(ctx, tmap_tiled, map, (int)dtype, rank, a, dims, strides, box, estrides, (int)interleave, (int)swizzle, (int)l2,
	     (int)oob);
}

CUresult gc_link_create(CUcontext ctx, void **state) { CALL(ctx, link_create, 0, NULL, NULL, state); }
CUresult gc_link_add(CUcontext ctx, void *state, int type, void *data, size_t n, const char *name) {
	CALL(ctx, link_add, state, type, data, n, name, 0, NULL, NULL);
}
// The image stays the link's until gc_link_destroy.
CUresult gc_link_complete(CUcontext ctx, void *state, void **image, size_t *n) { CALL(ctx, link_complete, state, image, n); }
CUresult gc_link_destroy(CUcontext ctx, void *state) { CALL(ctx, link_destroy, state); }

/* gc_module_load_pinned loads PTX whose module globals are .extern declarations, each resolved to
 * the address given for its name (CU_JIT_GLOBAL_SYMBOL_NAMES/ADDRESSES/COUNT, which the driver
 * applies "when loading a device module"; its JIT linker, cuLinkComplete, refuses them as
 * undefined references, measured on the H100). The JIT's error log goes to log. */
CUresult gc_module_load_pinned(CUcontext ctx, CUmodule *m, const char *ptx, size_t n, const char **names,
                               unsigned long long *addrs, unsigned count, char *log, unsigned logn) {
	(void)n;
	pthread_once(&f_once, f_resolve);
	if (!f.load_ex) return NOT_SUPPORTED;
	CUresult r = gc_bind(ctx);
	if (r != 0) return r;
	int opts[5] = {17 /* GLOBAL_SYMBOL_NAMES */, 18 /* ADDRESSES */, 19 /* COUNT */, 5 /* ERROR_LOG_BUFFER */,
	               6 /* ERROR_LOG_BUFFER_SIZE_BYTES */};
	void *vals[5] = {(void *)names, (void *)addrs, (void *)(uintptr_t)count, log, (void *)(uintptr_t)logn};
	return f.load_ex(m, ptx, 5, opts, vals);
}

// IPC's driver calls (ipc.h): a table resolved from the loaded driver on first use, and thin
// wrappers that pass NVIDIA's handles by value as cuda.h declares them.
#include "ipc.h"

#include "dl.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

void *gc_driver_lib(void);

#define NOT_SUPPORTED 801
#define POSIX_FD 1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

// cuda.h's CUipcMemHandle, CUipcEventHandle and CUmemPoolPtrExportData: 64 opaque bytes.
struct ipc_handle { char reserved[GC_IPC_HANDLE_SIZE]; };
struct loc { int type, id; };
struct access_desc { struct loc location; int flags; };

#define IPC_SYMBOLS(X)                                                                                 \
	X(get_mem, "cuIpcGetMemHandle", CUresult (*)(struct ipc_handle *, CUdeviceptr))                   \
	X(open_mem, "cuIpcOpenMemHandle_v2", CUresult (*)(CUdeviceptr *, struct ipc_handle, unsigned))    \
	X(close_mem, "cuIpcCloseMemHandle", CUresult (*)(CUdeviceptr))                                   \
	X(get_event, "cuIpcGetEventHandle", CUresult (*)(struct ipc_handle *, CUevent))                   \
	X(open_event, "cuIpcOpenEventHandle", CUresult (*)(CUevent *, struct ipc_handle))                 \
	X(mem_export, "cuMemExportToShareableHandle", CUresult (*)(void *, unsigned long long, int, unsigned long long)) \
	X(mem_import, "cuMemImportFromShareableHandle", CUresult (*)(unsigned long long *, void *, int))  \
	X(pool_export, "cuMemPoolExportToShareableHandle", CUresult (*)(void *, CUmemoryPool, int, unsigned long long)) \
	X(pool_import, "cuMemPoolImportFromShareableHandle", CUresult (*)(CUmemoryPool *, void *, int, unsigned long long)) \
	X(export_ptr, "cuMemPoolExportPointer", CUresult (*)(struct ipc_handle *, CUdeviceptr))           \
	X(import_ptr, "cuMemPoolImportPointer", CUresult (*)(CUdeviceptr *, CUmemoryPool, struct ipc_handle *)) \
	X(get_access, "cuMemPoolGetAccess", CUresult (*)(int *, CUmemoryPool, struct loc *))              \
	X(set_access, "cuMemPoolSetAccess", CUresult (*)(CUmemoryPool, const struct access_desc *, size_t))

GC_DL_OPTIONAL_TABLE(f, IPC_SYMBOLS)

// BIND makes ctx current, or returns: the driver's fn missing or the bind failing.
#define BIND(ctx, fn) GC_DL_BIND(f, ctx, fn)

// copy_out hands back the driver's answer r after copying the handle it wrote.
static CUresult copy_out(CUresult r, const struct ipc_handle *h, unsigned char out[GC_IPC_HANDLE_SIZE]) {
	memcpy(out, h->reserved, sizeof h->reserved);
	return r;
}

static struct ipc_handle handle_of(const unsigned char b[GC_IPC_HANDLE_SIZE]) {
	struct ipc_handle h;
	memcpy(h.reserved, b, sizeof h.reserved);
	return h;
}

CUresult gc_ipc_get_mem(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUdeviceptr p) {
	BIND(ctx, get_mem);
	struct ipc_handle h;
	return copy_out(f.get_mem(&h, p), &h, out);
}

CUresult gc_ipc_open_mem(CUcontext ctx, CUdeviceptr *p, const unsigned char h[GC_IPC_HANDLE_SIZE], unsigned flags) {
	BIND(ctx, open_mem);
	return f.open_mem(p, handle_of(h), flags);
}

CUresult gc_ipc_close_mem(CUcontext ctx, CUdeviceptr p) {
	BIND(ctx, close_mem);
	return f.close_mem(p);
}

CUresult gc_ipc_get_event(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUevent e) {
	BIND(ctx, get_event);
	struct ipc_handle h;
	return copy_out(f.get_event(&h, e), &h, out);
}

CUresult gc_ipc_open_event(CUcontext ctx, CUevent *e, const unsigned char h[GC_IPC_HANDLE_SIZE]) {
	BIND(ctx, open_event);
	return f.open_event(e, handle_of(h));
}

// A POSIX file descriptor handle is written as an int; it is passed in as the pointer's value.
CUresult gc_mem_export_fd(CUcontext ctx, int *fd, unsigned long long h) {
	BIND(ctx, mem_export);
	return f.mem_export(fd, h, POSIX_FD, 0);
}

CUresult gc_mem_import_fd(CUcontext ctx, unsigned long long *h, int fd) {
	BIND(ctx, mem_import);
	return f.mem_import(h, (void *)(uintptr_t)fd, POSIX_FD);
}

CUresult gc_pool_export_fd(CUcontext ctx, int *fd, CUmemoryPool pool) {
	BIND(ctx, pool_export);
	return f.pool_export(fd, pool, POSIX_FD, 0);
}

CUresult gc_pool_import_fd(CUcontext ctx, CUmemoryPool *pool, int fd) {
	BIND(ctx, pool_import);
	return f.pool_import(pool, (void *)(uintptr_t)fd, POSIX_FD, 0);
}

CUresult gc_pool_export_ptr(CUcontext ctx, unsigned char out[GC_IPC_HANDLE_SIZE], CUdeviceptr p) {
	BIND(ctx, export_ptr);
	struct ipc_handle h;
	return copy_out(f.export_ptr(&h, p), &h, out);
}

CUresult gc_pool_import_ptr(CUcontext ctx, CUdeviceptr *p, CUmemoryPool pool, const unsigned char d[GC_IPC_HANDLE_SIZE]) {
	BIND(ctx, import_ptr);
	struct ipc_handle h = handle_of(d);
	return f.import_ptr(p, pool, &h);
}

CUresult gc_pool_get_access(CUcontext ctx, unsigned *flags, CUmemoryPool pool, unsigned loc_type, int loc_id) {
	BIND(ctx, get_access);
	struct loc l = {(int)loc_type, loc_id};
	int v = 0;
	CUresult r = f.get_access(&v, pool, &l);
	*flags = (unsigned)v;
	return r;
}

CUresult gc_pool_set_access(CUcontext ctx, CUmemoryPool pool, unsigned loc_type, int loc_id, unsigned flags) {
	BIND(ctx, set_access);
	struct access_desc a = {{(int)loc_type, loc_id}, (int)flags};
	return f.set_access(pool, &a, 1);
}

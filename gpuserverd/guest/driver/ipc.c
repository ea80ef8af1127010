/* IPC between the processes of one instance (issue 14). Each process is its own session; what
 * one exports the worker files in the server's registry of the instance under a key of random
 * bytes (gpuserverd/server/ipc.go), and the handle the program passes on carries that key, never
 * NVIDIA's handle: a process of the same instance opens it, one of another instance is told
 * CUDA_ERROR_INVALID_HANDLE. A shareable handle (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) is a
 * sealed memfd holding the same 64 bytes, a real descriptor that SCM_RIGHTS and fork carry. */
#define _GNU_SOURCE /* memfd_create and file seals */
#include "families.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t gc_gen_event(void *e); /* api_stream.c */

/* The kinds of exported objects (the wire's IpcExport.kind). */
enum { IPC_MEMORY = 1, IPC_EVENT = 2, IPC_ALLOCATION = 3, IPC_POOL = 4, IPC_POOL_POINTER = 5 };

#define IPC_KEY 32
#define POSIX_FD 1

/* A handle's 64 bytes: magic, version, kind, the registry's key, and the size of the memory (for
 * the importer's own bookkeeping of device pointers: cuMemcpy tells device from host by it). */
struct ipc_handle {
    char magic[4];
    uint8_t version, kind, pad[2];
    uint8_t key[IPC_KEY];
    uint64_t size;
    uint8_t zero[16];
};
_Static_assert(sizeof(struct ipc_handle) == 64, "an IPC handle is 64 bytes");
static const char magic[4] = {'g', 'c', 'I', 'P'};

static CUresult keep_key(void *reply, void *arg) {
    const struct gw_ipc_key_reply *r = reply;
    if (r->key_len != IPC_KEY) return gc_transport_error("an IPC key of the wrong size");
    memcpy(arg, r->key, IPC_KEY);
    return CUDA_SUCCESS;
}

/* export files object in the instance's registry and writes its handle into out. */
static CUresult export(uint32_t kind, uint64_t object, uint32_t handle_type, uint64_t size, void *out) {
    struct gw_ipc_export m = {.kind = kind, .object = object, .handle_type = handle_type};
    GC_ENCODE(ipc_export, m, b);
    struct ipc_handle h = {.version = 1, .kind = (uint8_t)kind, .size = size};
    memcpy(h.magic, magic, sizeof magic);
    struct gw_ipc_key_reply r;
    CUresult rc = gc_request_keep(GW_TYPE_IPC_EXPORT, 0, b, b_n, NULL, 0, GW_TYPE_IPC_KEY_REPLY, &r, keep_key, h.key);
    if (rc == CUDA_SUCCESS) memcpy(out, &h, sizeof h);
    return rc;
}

/* parse reads a handle of kind from 64 bytes: anything else is not one of ours. */
static CUresult parse(const void *in, uint32_t kind, struct ipc_handle *h) {
    memcpy(h, in, sizeof *h);
    if (memcmp(h->magic, magic, sizeof magic) != 0 || h->version != 1 || h->kind != kind) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return CUDA_SUCCESS;
}

/* import opens a parsed handle in this session. */
static CUresult import(const struct ipc_handle *h, uint64_t pool, uint32_t flags, uint64_t *out) {
    struct gw_ipc_import m = {.kind = h->kind, .key = h->key, .key_len = IPC_KEY, .pool = pool, .flags = flags};
    GC_ENCODE(ipc_import, m, b);
    return gc_handle_call(GW_TYPE_IPC_IMPORT, b, b_n, out);
}

/* The shareable handle: a sealed memfd of the handle's 64 bytes. */
static CUresult to_fd(const void *handle, int *out) {
    int fd = memfd_create("gpucloud-ipc", MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, handle, 64, 0) != 64 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *out = fd;
    return CUDA_SUCCESS;
}

static CUresult from_fd(void *os_handle, uint32_t kind, struct ipc_handle *h) {
    int fd = (int)(intptr_t)os_handle;
    struct stat st;
    uint8_t buf[64];
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size != 64 || pread(fd, buf, 64, 0) != 64) {
        return CUDA_ERROR_INVALID_VALUE; /* not a descriptor gpucloud's export gave */
    }
    return parse(buf, kind, h);
}

static uint64_t alloc_size(CUdeviceptr p) {
    CUdeviceptr base;
    size_t n;
    return gc_find_alloc(p, &base, &n) && base == p ? n : 0;
}

/* NVIDIA's driver takes the virtual-memory calls without a current context (the allocation's
 * location names the device): memMapIPCDrv creates, exports and releases its allocations after
 * destroying its contexts. Such a call makes device dev's primary context current for its
 * length (the session's device lives on whatever contexts the program holds). */
int gc_ctx_fallback(int dev) {
    int cur;
    CUcontext c;
    if (gc_current_device(&cur) == CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) return 0;
    if (cuCtxPushCurrent_v2(c) != CUDA_SUCCESS) {
        cuDevicePrimaryCtxRelease_v2(dev);
        return 0;
    }
    return 1;
}

void gc_ctx_restore(int pushed, int dev) {
    if (!pushed) return;
    CUcontext c;
    cuCtxPopCurrent_v2(&c);
    cuDevicePrimaryCtxRelease_v2(dev);
}

/* ---- legacy IPC: cuIpc* ---- */

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    if (!h || !p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(export(IPC_MEMORY, p, 0, alloc_size(p), h));
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle handle, unsigned flags) {
    if (!p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct ipc_handle h;
    CUresult rc = parse(&handle, IPC_MEMORY, &h);
    uint64_t out;
    if (rc == CUDA_SUCCESS) rc = import(&h, 0, flags, &out);
    if (rc == CUDA_SUCCESS) {
        *p = out;
        if (h.size) gc_track_alloc(out, h.size);
    }
    return GC_T(rc);
}
ALIAS(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2);

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    struct gw_ipc_close m = {.ptr = p};
    GC_ENCODE(ipc_close, m, b);
    CUresult rc = gc_call_status(GW_TYPE_IPC_CLOSE, 0, b, b_n);
    if (rc == CUDA_SUCCESS) gc_untrack_alloc(p);
    return GC_T(rc);
}

EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e) {
    if (!h) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!e) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    return GC_T(export(IPC_EVENT, gc_gen_event(e), 0, 0, h));
}

EXPORT CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle handle) {
    if (!e) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct ipc_handle h;
    CUresult rc = parse(&handle, IPC_EVENT, &h);
    uint64_t out;
    int dev = 0;
    if (rc == CUDA_SUCCESS) rc = gc_current_device(&dev);
    if (rc == CUDA_SUCCESS) rc = import(&h, 0, 0, &out);
    /* As api_stream.c's EVENT_PTR: the worker's id and the device it lives on. */
    if (rc == CUDA_SUCCESS) *e = (CUevent)(uintptr_t)(out << 8 | (uint64_t)(dev + 1) << 56);
    return GC_T(rc);
}

/* ---- shareable handles of cuMemCreate allocations ---- */

EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType type, unsigned long long flags) {
    if (!out || flags) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (type != POSIX_FD) return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    struct ipc_handle h;
    int pushed = gc_ctx_fallback(0);
    CUresult rc = export(IPC_ALLOCATION, handle, type, 0, &h);
    gc_ctx_restore(pushed, 0);
    if (rc == CUDA_SUCCESS) rc = to_fd(&h, out);
    return GC_T(rc);
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                               CUmemAllocationHandleType type) {
    if (!handle) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (type != POSIX_FD) return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    struct ipc_handle h;
    CUresult rc = from_fd(os_handle, IPC_ALLOCATION, &h);
    uint64_t out;
    if (rc == CUDA_SUCCESS) rc = import(&h, 0, 0, &out);
    if (rc == CUDA_SUCCESS) *handle = out;
    return GC_T(rc);
}

/* ---- memory pools and their allocations ---- */

EXPORT CUresult cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool, CUmemAllocationHandleType type,
                                                 unsigned long long flags) {
    if (!out || !pool || flags) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (type != POSIX_FD) return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    struct ipc_handle h;
    CUresult rc = export(IPC_POOL, GC_ID(pool), type, 0, &h);
    if (rc == CUDA_SUCCESS) rc = to_fd(&h, out);
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os_handle, CUmemAllocationHandleType type,
                                                   unsigned long long flags) {
    if (!pool || flags) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (type != POSIX_FD) return GC_T(CUDA_ERROR_NOT_SUPPORTED);
    struct ipc_handle h;
    CUresult rc = from_fd(os_handle, IPC_POOL, &h);
    uint64_t out;
    if (rc == CUDA_SUCCESS) rc = import(&h, 0, 0, &out);
    if (rc == CUDA_SUCCESS) *pool = GC_PTR(CUmemoryPool, out);
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr p) {
    if (!out || !p) return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(export(IPC_POOL_POINTER, p, 0, alloc_size(p), out));
}

EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, CUmemPoolPtrExportData *data) {
    if (!p || !pool || !data) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct ipc_handle h;
    CUresult rc = parse(data, IPC_POOL_POINTER, &h);
    uint64_t out;
    if (rc == CUDA_SUCCESS) rc = import(&h, GC_ID(pool), 0, &out);
    if (rc == CUDA_SUCCESS) {
        *p = out;
        if (h.size) gc_track_alloc(out, h.size);
    }
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc) {
    if (!flags || !loc) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_mem_pool_get_access m = {.pool = GC_ID(pool), .location_type = loc->type, .location_id = loc->id};
    GC_ENCODE(mem_pool_get_access, m, b);
    struct gw_value_reply r;
    CUresult rc = gc_request(GW_TYPE_MEM_POOL_GET_ACCESS, 0, b, b_n, GW_TYPE_VALUE_REPLY, &r);
    if (rc == CUDA_SUCCESS) *flags = (CUmemAccess_flags)r.value;
    return GC_T(rc);
}

EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
    if (!map && count) return GC_T(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++) {
        struct gw_mem_pool_set_access m = {.pool = GC_ID(pool), .location_type = map[i].location.type,
                                           .location_id = map[i].location.id, .flags = map[i].flags};
        GC_ENCODE(mem_pool_set_access, m, b);
        CUresult rc = gc_call_status(GW_TYPE_MEM_POOL_SET_ACCESS, 0, b, b_n);
        if (rc != CUDA_SUCCESS) return GC_T(rc);
    }
    return GC_T(CUDA_SUCCESS);
}

/* Modules, libraries, functions and launches. */
#include "guest.h"

#include "driver/coherence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* image_size works out how many bytes a module image spans: cuModuleLoadData gets a bare pointer. */
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

/* elf_size is the extent of a 64-bit ELF image (a cubin): the furthest byte any header table,
 * section or segment reaches; the tables may sit anywhere in the file. */
static size_t elf_size(const uint8_t *p) {
    uint64_t shoff, phoff;
    uint16_t shentsize, shnum, phentsize, phnum;
    memcpy(&phoff, p + 0x20, 8);
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&phentsize, p + 0x36, 2);
    memcpy(&phnum, p + 0x38, 2);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    size_t end = 0x40;
    if (shoff + (size_t)shentsize * shnum > end) end = shoff + (size_t)shentsize * shnum;
    if (phoff + (size_t)phentsize * phnum > end) end = phoff + (size_t)phentsize * phnum;
    for (uint16_t i = 0; shentsize >= 0x40 && i < shnum; i++) {
        const uint8_t *sh = p + shoff + (size_t)i * shentsize;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4);
        memcpy(&off, sh + 0x18, 8);
        memcpy(&size, sh + 0x20, 8);
        if (type != 8 /* SHT_NOBITS */ && off + size > end) end = off + size;
    }
    for (uint16_t i = 0; phentsize >= 0x38 && i < phnum; i++) {
        const uint8_t *ph = p + phoff + (size_t)i * phentsize;
        uint64_t off, filesz;
        memcpy(&off, ph + 0x08, 8);
        memcpy(&filesz, ph + 0x20, 8);
        if (off + filesz > end) end = off + filesz;
    }
    return end;
}

static size_t image_size(const void *image) {
    const uint8_t *p = image;
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && p[4] == 2) return elf_size(p);
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_MAGIC) { /* u32 magic, u16 version, u16 header size, u64 body size */
        uint16_t hsize;
        uint64_t body;
        memcpy(&hsize, p + 6, 2);
        memcpy(&body, p + 8, 8);
        return hsize + body;
    }
    return strlen((const char *)p) + 1; /* PTX or other text, NUL-terminated */
}

/* Unwraps the fat-binary wrapper nvcc emits ({magic, version, data, filename}). */
static const void *unwrap(const void *image) {
    uint32_t magic;
    memcpy(&magic, image, 4);
    if (magic == FATBIN_WRAPPER_MAGIC) {
        const void *data;
        memcpy(&data, (const uint8_t *)image + 8, sizeof data);
        return data;
    }
    return image;
}

static CUresult load(struct CUmod_st **out, const void *image, size_t n) {
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    if (n > GW_MAX_FRAME - 4) return CUDA_ERROR_INVALID_IMAGE;
    struct gw_module_load m = {.image = image, .image_len = (uint32_t)n};
    uint8_t head[8];
    uint8_t *end = gw_module_load_encode_head(&m, head);
    struct gw_handle_reply hr;
    CUresult rc = gc_request_tail(GW_TYPE_MODULE_LOAD, head, end - head, image, n, GW_TYPE_HANDLE_REPLY, &hr);
    if (rc != CUDA_SUCCESS) return rc;
    struct CUmod_st *mod = calloc(1, sizeof *mod);
    if (!mod) return CUDA_ERROR_OUT_OF_MEMORY;
    mod->handle = hr.handle;
    *out = mod;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    if (!image) return GC_T(CUDA_ERROR_INVALID_VALUE);
    image = unwrap(image);
    return GC_T(load(module, image, image_size(image)));
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned n, CUjit_option *o, void **v) {
    (void)n; (void)o; (void)v; /* JIT options tune the server-side compile; none change meaning */
    return GC_T(cuModuleLoadData(module, image));
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return cuModuleLoadData(module, fatCubin); }

static CUresult read_file(const char *path, void **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || len > GW_MAX_FRAME - 8) {
        fclose(f);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    char *buf = malloc(len + 1);
    if (!buf) {
        fclose(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t got = fread(buf, 1, len, f);
    fclose(f);
    buf[got] = 0;
    *data = buf;
    *n = got + 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) {
    if (!fname) return GC_T(CUDA_ERROR_INVALID_VALUE);
    void *data;
    size_t n;
    CUresult rc = read_file(fname, &data, &n);
    if (rc == CUDA_SUCCESS) {
        rc = load(module, data, n);
        free(data);
    }
    return GC_T(rc);
}

/* The server's driver loads module code lazily (CUDA 12.2+'s default) unless told otherwise with
 * CUDA_MODULE_LOADING=EAGER, which a program sets for itself; cuBLAS asks at start-up. */
EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
    if (!mode) return GC_T(CUDA_ERROR_INVALID_VALUE);
    const char *v = getenv("CUDA_MODULE_LOADING");
    *mode = v && !strcmp(v, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuModuleUnload(CUmodule mod) {
    if (!mod) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_module_unload m = {.module = mod->handle};
    GC_ENCODE(module_unload, m, b);
    CUresult rc = gc_call_status(GW_TYPE_MODULE_UNLOAD, 0, b, b_n);
    if (rc == CUDA_SUCCESS) {
        for (int i = 0; i < mod->nmanaged; i++) gc_coh_disown(mod->managed[i].ptr, mod->managed[i].bytes);
        free(mod->managed);
        free(mod);
    }
    return GC_T(rc);
}

CUresult gc_handle_call(uint16_t type, const uint8_t *b, size_t n, uint64_t *out) {
    struct gw_handle_reply hr;
    CUresult rc = gc_request(type, 0, b, n, GW_TYPE_HANDLE_REPLY, &hr);
    if (rc == CUDA_SUCCESS) *out = hr.handle;
    return rc;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule mod, const char *name) {
    if (!hfunc || !name) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!mod) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_module_get_function m = {.module = mod->handle, .name = name, .name_len = (uint32_t)strlen(name)};
    if (m.name_len > 1024) return GC_T(CUDA_ERROR_INVALID_VALUE);
    GC_ENCODE(module_get_function, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_MODULE_GET_FUNCTION, b, b_n, &h);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f) return GC_T(CUDA_ERROR_OUT_OF_MEMORY);
    f->handle = h;
    *hfunc = f;
    return GC_T(CUDA_SUCCESS);
}

/* managed_var makes a managed variable's address one the host dereferences too, as NVIDIA's
 * unified memory does: a coherent shadow at the same address (driver/coherence.c), whatever the
 * transport, since the variable lives in the server's memory. Where that address is taken in this
 * process the variable stays the device's alone, and the program is told once. */
static CUresult managed_var(struct CUmod_st *mod, CUdeviceptr p, size_t n) {
    for (int i = 0; i < mod->nmanaged; i++)
        if (mod->managed[i].ptr == p) return CUDA_SUCCESS;
    CUresult rc = gc_coh_adopt(p, n);
    if (rc == CUDA_ERROR_NOT_SUPPORTED) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpucloud: a managed variable's address (%#llx) is taken in this process: its host "
                            "pointer cannot be dereferenced here\n", (unsigned long long)p);
        return CUDA_SUCCESS;
    }
    if (rc != CUDA_SUCCESS) return rc;
    struct gc_managed_var *v = realloc(mod->managed, (mod->nmanaged + 1) * sizeof *v);
    if (!v) {
        gc_coh_disown(p, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v[mod->nmanaged++] = (struct gc_managed_var){p, n};
    mod->managed = v;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name) {
    if (!name) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!mod) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_module_get_global_managed m = {.module = mod->handle, .name = name, .name_len = (uint32_t)strlen(name)};
    if (m.name_len > 1024) return GC_T(CUDA_ERROR_INVALID_VALUE);
    GC_ENCODE(module_get_global_managed, m, b);
    struct gw_module_global_reply gr;
    CUresult rc = gc_request(GW_TYPE_MODULE_GET_GLOBAL_MANAGED, 0, b, b_n, GW_TYPE_MODULE_GLOBAL_REPLY, &gr);
    if (rc == CUDA_SUCCESS && gr.managed) rc = managed_var(mod, gr.ptr, gr.bytes);
    if (rc == CUDA_SUCCESS) {
        if (dptr) *dptr = gr.ptr;
        if (bytes) *bytes = gr.bytes;
        gc_track_alloc(gr.ptr, gr.bytes);
    }
    return GC_T(rc);
}
ALIAS(cuModuleGetGlobal, cuModuleGetGlobal_v2);

/* ---- libraries: a library is a module loaded in the current context; a kernel is a function ---- */

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned njo,
                                  CUlibraryOption *lo, void **lv, unsigned nlo) {
    (void)jo; (void)jv; (void)njo; (void)lo; (void)lv; (void)nlo;
    if (!lib || !code) return CUDA_ERROR_INVALID_VALUE;
    struct CUlib_st *l = calloc(1, sizeof *l);
    if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = cuModuleLoadData(&l->mod, code);
    if (rc != CUDA_SUCCESS) {
        free(l);
        return rc;
    }
    *lib = l;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, CUjit_option *jo, void **jv, unsigned njo,
                                      CUlibraryOption *lo, void **lv, unsigned nlo) {
    if (!path) return CUDA_ERROR_INVALID_VALUE;
    void *data;
    size_t n;
    CUresult rc = read_file(path, &data, &n);
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuLibraryLoadData(lib, data, jo, jv, njo, lo, lv, nlo);
    free(data);
    return rc;
}

EXPORT CUresult cuLibraryUnload(CUlibrary lib) {
    if (!lib) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    CUresult rc = cuModuleUnload(lib->mod);
    if (rc == CUDA_SUCCESS) free(lib);
    return GC_T(rc);
}

EXPORT CUresult cuLibraryGetModule(CUmodule *mod, CUlibrary lib) {
    if (!mod) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!lib) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    *mod = lib->mod;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary lib, const char *name) {
    if (!kernel) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!lib) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    return GC_T(cuModuleGetFunction((CUfunction *)kernel, lib->mod, name));
}

EXPORT CUresult cuKernelGetFunction(CUfunction *func, CUkernel kernel) {
    if (!func) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!kernel) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    *func = (CUfunction)kernel;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attr, CUfunction f) {
    if (!pi) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!f) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_func_get_attribute m = {.function = f->handle, .attribute = (int32_t)attr};
    GC_ENCODE(func_get_attribute, m, b);
    struct gw_value_reply v;
    CUresult rc = gc_request(GW_TYPE_FUNC_GET_ATTRIBUTE, 0, b, b_n, GW_TYPE_VALUE_REPLY, &v);
    if (rc == CUDA_SUCCESS) *pi = v.value;
    return GC_T(rc);
}

EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
    if (!f) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_func_set_attribute m = {.function = f->handle, .attribute = (int32_t)attr, .value = value};
    GC_ENCODE(func_set_attribute, m, b);
    return GC_T(gc_call_status(GW_TYPE_FUNC_SET_ATTRIBUTE, 0, b, b_n));
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t shared,
                                                                     unsigned flags) {
    if (!n) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!f) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    struct gw_occupancy_max_active_blocks m = {
        .function = f->handle, .block_size = block, .dynamic_shared = shared, .flags = flags};
    GC_ENCODE(occupancy_max_active_blocks, m, b);
    struct gw_value_reply v;
    CUresult rc = gc_request(GW_TYPE_OCCUPANCY_MAX_ACTIVE_BLOCKS, 0, b, b_n, GW_TYPE_VALUE_REPLY, &v);
    if (rc == CUDA_SUCCESS) *n = v.value;
    return GC_T(rc);
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t shared) {
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, shared, CU_OCCUPANCY_DEFAULT);
}

/* cuOccupancyMaxPotentialBlockSize[WithFlags], computed here as NVIDIA's own reference does
 * (cuda_runtime.h, cudaOccupancyMaxPotentialBlockSizeVariableSMemWithFlags): every block size from
 * the limit down in steps of the warp size, the caller's callback giving each one's dynamic shared
 * memory (a guest function pointer, so it cannot travel), the remoted occupancy query for each,
 * keeping the size with the most resident threads and stopping once a multiprocessor is full. */
EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size, CUfunction f,
                                                          CUoccupancyB2DSize smem_of, size_t smem, int limit,
                                                          unsigned flags) {
    if (!min_grid || !block_size) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (!f) return GC_T(CUDA_ERROR_INVALID_HANDLE);
    CUdevice dev;
    int sm_threads, warp, dev_block, sms, fn_block;
    CUresult rc = cuCtxGetDevice(&dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(&sm_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(&dev_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (rc == CUDA_SUCCESS) rc = cuFuncGetAttribute(&fn_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    if (warp <= 0) return GC_T(CUDA_ERROR_UNKNOWN);
    if (limit <= 0 || limit > dev_block) limit = dev_block;
    if (fn_block < limit) limit = fn_block;
    int best_block = 0, best_blocks = 0, best_threads = 0;
    for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
        int size = aligned > limit ? limit : aligned;
        int blocks;
        rc = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, size, smem_of ? smem_of(size) : smem,
                                                                  flags);
        if (rc != CUDA_SUCCESS) return GC_T(rc);
        if (size * blocks > best_threads) best_block = size, best_blocks = blocks, best_threads = size * blocks;
        if (best_threads == sm_threads) break;
    }
    *min_grid = best_blocks * sms;
    *block_size = best_block;
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction f, CUoccupancyB2DSize smem_of,
                                                 size_t smem, int limit) {
    return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block_size, f, smem_of, smem, limit, CU_OCCUPANCY_DEFAULT);
}

/* ---- launches ---- */

/* layout fetches the function's parameter offsets and sizes once. Caller holds gc.mu. */
static CUresult layout_locked(struct CUfunc_st *f) {
    if (f->layout_loaded) return CUDA_SUCCESS;
    struct gw_func_param_layout m = {.function = f->handle};
    GC_ENCODE(func_param_layout, m, b);
    struct gc_reply r;
    CUresult rc = gc_xfer_locked(GW_TYPE_FUNC_PARAM_LAYOUT, 0, b, b_n, NULL, 0, GW_TYPE_FUNC_PARAM_LAYOUT_REPLY, &r);
    if (rc != CUDA_SUCCESS) return rc;
    struct gw_func_param_layout_reply lr;
    char err[128];
    if (gw_func_param_layout_reply_decode(&lr, r.p, r.n, err, sizeof err) != 0) return gc_transport_error(err);
    if (lr.result != 0) return (CUresult)lr.result;
    if (lr.offsets_count != lr.sizes_count) return gc_transport_error("parameter layout with unequal lists");
    f->offsets = calloc(lr.offsets_count + 1, sizeof *f->offsets);
    f->sizes = calloc(lr.offsets_count + 1, sizeof *f->sizes);
    if (!f->offsets || !f->sizes) return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < lr.offsets_count; i++) {
        f->offsets[i] = gw_u32_at(lr.offsets, i);
        f->sizes[i] = gw_u32_at(lr.sizes, i);
        if (f->offsets[i] + (uint64_t)f->sizes[i] > 32768) return gc_transport_error("parameter layout past 32 KiB");
    }
    f->nparams = lr.offsets_count;
    f->layout_loaded = 1;
    return CUDA_SUCCESS;
}

CUresult gc_pack_params_locked(CUfunction f, void **params, void **extra, uint8_t packed[32768], const void **pbuf,
                               size_t *plen) {
    CUresult rc = CUDA_SUCCESS;
    *pbuf = packed;
    *plen = 0;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (params) {
        rc = layout_locked(f);
        for (uint32_t i = 0; rc == CUDA_SUCCESS && i < f->nparams; i++) {
            memcpy(packed + f->offsets[i], params[i], f->sizes[i]);
            size_t end = f->offsets[i] + f->sizes[i];
            if (end > *plen) *plen = end;
        }
    } else if (extra) {
        size_t *size = NULL;
        *pbuf = NULL;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) *pbuf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = extra[i + 1];
            else return CUDA_ERROR_INVALID_VALUE;
        }
        if (!*pbuf || !size || *size > 32768) return CUDA_ERROR_INVALID_VALUE;
        *plen = *size;
    }
    return rc;
}

CUresult gc_promote_params(CUfunction f, void **params, void **extra) {
    if (!gc_coh_lazy_any()) return CUDA_SUCCESS;
    if (extra) {
        const void *buf = NULL;
        size_t *size = NULL;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = extra[i + 1];
        }
        if (buf && size && *size <= 32768) gc_coh_promote_words(buf, *size);
        return CUDA_SUCCESS;
    }
    if (!params) return CUDA_SUCCESS;
    pthread_mutex_lock(&gc.mu);
    CUresult rc = layout_locked(f);
    pthread_mutex_unlock(&gc.mu);
    for (uint32_t i = 0; rc == CUDA_SUCCESS && i < f->nparams; i++) gc_coh_promote_words(params[i], f->sizes[i]);
    return rc;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc == CUDA_SUCCESS) rc = gc_promote_params(f, params, extra); /* pinned memory a kernel may see */
    if (rc == CUDA_SUCCESS) rc = gc_coh_before(GW_TYPE_LAUNCH_KERNEL); /* managed memory goes to the device */
    if (rc != CUDA_SUCCESS) return rc;
    uint8_t packed[32768];
    const void *pbuf = packed;
    size_t plen = 0;
    pthread_mutex_lock(&gc.mu);
    rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS) rc = gc_pack_params_locked(f, params, extra, packed, &pbuf, &plen);
    if (rc == CUDA_SUCCESS) {
        struct gw_launch_kernel m = {.function = f->handle, .grid_x = gx, .grid_y = gy, .grid_z = gz,
                                     .block_x = bx, .block_y = by, .block_z = bz, .shared_mem = shared,
                                     .stream = gc_stream_handle(s), .params = pbuf, .params_len = (uint32_t)plen};
        uint8_t head[64];
        uint8_t *end = gw_launch_kernel_encode_head(&m, head);
        /* Asynchronous, as on a GPU: errors surface at the next synchronising call. */
        rc = gc_xfer_locked(GW_TYPE_LAUNCH_KERNEL, GW_FLAG_NO_REPLY, head, end - head, pbuf, plen, 0, NULL);
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

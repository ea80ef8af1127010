/* Reaching gpucloud's private table from a vendor-library stand-in (libcublas, libcublasLt,
 * libcudnn, libnccl): cuInit, the table by its id, and the release checks, each failure said once
 * on stderr naming the library. Include cuda.h, wire_gen.h and gpucloud_private.h first. */
#ifndef GPUCLOUD_TABLE_H
#define GPUCLOUD_TABLE_H

#include <stdio.h>
#include <string.h>

/* gc_table_load returns gpucloud's private table, or NULL (having said why) when this process's
 * libcuda is not gpucloud's guest library of this release or has no session. */
static inline const struct gc_private_table *gc_table_load(const char *lib) {
    CUresult rc = cuInit(0);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "gpucloud %s: cuInit failed (%d): no session with gpuserverd\n", lib, rc);
        return NULL;
    }
    static const unsigned char id[16] = GC_PRIVATE_TABLE_ID;
    CUuuid u;
    memcpy(u.bytes, id, sizeof id);
    const void *t = NULL;
    if (cuGetExportTable(&t, &u) != CUDA_SUCCESS || !t) {
        fprintf(stderr, "gpucloud %s: the libcuda.so.1 in this process is not gpucloud's guest library; this %s "
                        "only forwards calls to gpuserverd (use NVIDIA's library on NVIDIA's driver)\n", lib, lib);
        return NULL;
    }
    const struct gc_private_table *p = t;
    if (p->size < sizeof *p || p->abi != GC_PRIVATE_ABI || p->wire_version != GW_VERSION ||
        p->wire_check != GC_PRIVATE_WIRE_CHECK) {
        fprintf(stderr, "gpucloud %s: the guest libcuda.so.1 is from another gpucloud release (table abi %u, wire %u/%#x; "
                        "want %u, %u/%#x)\n", lib, p->abi, p->wire_version, p->wire_check, GC_PRIVATE_ABI, GW_VERSION,
                GC_PRIVATE_WIRE_CHECK);
        return NULL;
    }
    return p;
}

#endif

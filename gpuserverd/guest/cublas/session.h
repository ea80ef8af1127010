/* The guest libcuda's session, as gpucloud's vendor-library stand-ins (libcublas, libcublasLt)
 * reach it: through gpucloud's private export table (include/gpucloud_private.h). Over any other
 * libcuda the library refuses to start, saying why. Included once by each library's C file
 * (static state: each library holds its own reference to the table). Define GC_LIB_NAME (the
 * name in messages) and GC_STATUS_* before including. */
#ifndef GPUCLOUD_GUEST_SESSION_H
#define GPUCLOUD_GUEST_SESSION_H

#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../wire_gen.h"
#include "../include/gpucloud_private.h"

static const struct gc_private_table *T;
static int t_ok;
static pthread_once_t t_once = PTHREAD_ONCE_INIT;

static void load_table(void) {
    CUresult rc = cuInit(0);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "gpucloud " GC_LIB_NAME ": cuInit failed (%d): no session with gpuserverd\n", rc);
        return;
    }
    static const unsigned char id[16] = GC_PRIVATE_TABLE_ID;
    CUuuid u;
    memcpy(u.bytes, id, sizeof id);
    const void *t = NULL;
    if (cuGetExportTable(&t, &u) != CUDA_SUCCESS || !t) {
        fprintf(stderr, "gpucloud " GC_LIB_NAME ": the libcuda.so.1 in this process is not gpucloud's guest "
                        "library; this " GC_LIB_NAME " only forwards calls to gpuserverd (use NVIDIA's "
                        "library on NVIDIA's driver)\n");
        return;
    }
    const struct gc_private_table *p = t;
    if (p->size < sizeof *p || p->abi != GC_PRIVATE_ABI || p->wire_version != GW_VERSION ||
        p->wire_check != GC_PRIVATE_WIRE_CHECK) {
        fprintf(stderr, "gpucloud " GC_LIB_NAME ": the guest libcuda.so.1 is from another gpucloud release "
                        "(table abi %u, wire %u/%#x; want %u, %u/%#x)\n",
                p->abi, p->wire_version, p->wire_check, GC_PRIVATE_ABI, GW_VERSION, GC_PRIVATE_WIRE_CHECK);
        return;
    }
    T = p;
    t_ok = 1;
}

/* session_ready is 1 once the session's table is reached (the first call tries). */
static int session_ready(void) {
    pthread_once(&t_once, load_table);
    return t_ok;
}

/* session_device gives the calling thread's device, making device 0's primary context current
 * where the thread has none (as the runtime does lazily): 0, or -1 when that fails. */
static int session_device(int *dev) {
    if (T->current_device(dev) == CUDA_SUCCESS) return 0;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) return -1;
    *dev = 0;
    return 0;
}

/* session_on_device makes sure the calling thread works on device (a handle's): with no current
 * context it makes that device's primary context current; 1 when the thread is current on another
 * device (the handle belongs to its own), -1 when no context could be made current. */
static int session_on_device(int device) {
    int dev;
    if (T->current_device(&dev) == CUDA_SUCCESS) return dev == device ? 0 : 1;
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, device) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) return -1;
    return 0;
}

#endif

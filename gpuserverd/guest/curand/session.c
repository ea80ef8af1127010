/* gpucloud's libcurand.so.10: cuRAND's host API remoted to gpuserverd through the generic library
 * call (RandCall; backend/libcall.go). Generators are the worker's ids. calls_gen.c has every
 * function of NVIDIA's curand.h; this file what answers without the server. NVIDIA's device-side
 * cuRAND (curand_kernel.h) is header-only: kernels that use it need nothing from this library. */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_curand_guest = 1;

GC_LIBCALL_DEFINE("libcurand", rand, RAND, CURAND_STATUS_INITIALIZATION_FAILED, CURAND_STATUS_INTERNAL_ERROR)

/* The cuRAND API this library implements: CUDA 13's (CURAND_VERSION 10400). */
EXPORT int curandGetVersion(int *version) {
    if (!version) return CURAND_STATUS_OUT_OF_RANGE;
    *version = 10400;
    return CURAND_STATUS_SUCCESS;
}

/* curandGetProperty(libraryPropertyType, int *): MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2. */
EXPORT int curandGetProperty(int type, int *value) {
    static const int v[3] = {10, 4, 0};
    if (!value || type < 0 || type > 2) return CURAND_STATUS_OUT_OF_RANGE;
    *value = v[type];
    return CURAND_STATUS_SUCCESS;
}

/* gc_rand_table_request sends RandTable (see tables.c): table's size into *size, and with dst its
 * first bytes copied to device memory at dst. cuRAND's status. */
int gc_rand_table_request(uint32_t table, uint64_t dst, uint64_t bytes, uint64_t *size) {
    int st = gc_lib_ready();
    if (st != 0) return st;
    struct gw_rand_table m = {.table = table, .dst = dst, .bytes = bytes};
    uint8_t b[32];
    if (gw_rand_table_size(&m) > sizeof b) return CURAND_STATUS_INTERNAL_ERROR;
    gw_rand_table_encode(&m, b);
    struct gw_rand_reply r;
    memset(&r, 0, sizeof r);
    CUresult rc = gc_lib_table->request(GW_TYPE_RAND_TABLE, 0, b, gw_rand_table_size(&m), GW_TYPE_RAND_REPLY, &r);
    if (r.status != 0) return r.status;
    if (rc != CUDA_SUCCESS) return CURAND_STATUS_INTERNAL_ERROR;
    *size = r.o0;
    return CURAND_STATUS_SUCCESS;
}

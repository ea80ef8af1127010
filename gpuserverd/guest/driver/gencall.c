/* The generic path of the generated entry points (api_gen.c): one ApiCall frame carrying the
 * function's wire id, one u64 per parameter and then each output's value before the call (a driver
 * may leave an output as it was), answered by ApiCallReply with one u64 per parameter (the
 * outputs). See apigen/desc/driver.txt for the ids. */
#include "guest.h"
#include "api_gen.h"

#include <stdio.h>

int gc_gen_call(uint16_t id, const char *name, int mode, const uint64_t *args, int nwords, uint64_t *out, int n) {
    uint8_t raw[256];
    if (n < 0 || nwords < n || (size_t)nwords * 8 > sizeof raw) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nwords; i++)
        for (int j = 0; j < 8; j++) raw[8 * i + j] = (uint8_t)(args[i] >> (8 * j));
    struct gw_api_call m = {.fn = id, .args = raw, .args_len = (uint32_t)nwords * 8};
    GC_ENCODE(api_call, m, b);
    uint16_t flags = (mode & GC_GEN_ASYNC) ? GW_FLAG_NO_REPLY : 0;
    struct gw_api_call_reply r;
    CUresult rc;
    if (mode & (GC_GEN_CONTEXT | GC_GEN_ASYNC)) rc = gc_request(GW_TYPE_API_CALL, flags, b, b_n, GW_TYPE_API_CALL_REPLY, &r);
    else rc = gc_request_global(GW_TYPE_API_CALL, b, b_n, GW_TYPE_API_CALL_REPLY, &r);
    if (rc == CUDA_SUCCESS && !flags) {
        if (r.out_len != (uint32_t)n * 8) return gc_transport_error("ApiCallReply: outputs do not match the call's parameters");
        for (int i = 0; i < n; i++) {
            const uint8_t *o = r.out;
            uint64_t v = 0;
            for (int j = 0; j < 8; j++) v |= (uint64_t)o[8 * i + j] << (8 * j);
            out[i] = v;
        }
    }
    return (int)gc_traced(name, rc);
}

uint64_t gc_gen_function(void *f) { return f ? ((struct CUfunc_st *)f)->handle : 0; }
uint64_t gc_gen_stream(void *s) { return gc_stream_handle((CUstream)s); }

int gc_refused(const char *name, int *said) {
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "gpucloud: %s is not supported by gpucloud's driver (CUDA_ERROR_NOT_SUPPORTED)\n", name);
    return (int)gc_traced(name, CUDA_ERROR_NOT_SUPPORTED);
}

/* gpucloud's NPP libraries (libnppc.so.13 ... libnpps.so.13): NPP remoted to gpuserverd through the
 * generic library call (NppCall; backend/libcall.go). Every library carries this file: its own
 * link to the session (the guest libcuda's private table) and the stream contexts' mapping. */
#include "internal.h"
#include "sigs_gen.h"

/* Lets gpuserverd's cuda backend refuse these libraries if they were found in NVIDIA's place. */
EXPORT const int gpucloud_npp_guest = 1;

GC_LIBCALL_DEFINE("libnpp", npp, NPP, NPP_CUDA_KERNEL_EXECUTION_ERROR, NPP_CUDA_KERNEL_EXECUTION_ERROR)

/* An NppStreamContext starts with the program's stream (cudaStream_t hStream): the worker runs
 * NVIDIA's function on its own stream of that handle; the rest (device attributes the program
 * read through gpucloud's runtime) travels as it is. */
int gc_npp_ctx(struct gc_host *hb, const void *ctx, uint64_t *w) {
    uint8_t c[sizeof(NppStreamContext)];
    memcpy(c, ctx, sizeof c);
    void *s;
    memcpy(&s, c, sizeof s);
    uint64_t h = gc_lib_stream(s);
    memcpy(c, &h, sizeof h);
    return gc_host_add(hb, c, 1, sizeof c, w);
}

/* gc_npp_send makes one NppCall of function id from its n words and pointers, reading what each
 * parameter is from kinds (sigs_gen.h, one token a parameter: v a value and d a device address,
 * both in w already; rW an output of W bytes; hC*U a host array of C elements of U bytes; bS a
 * struct of S bytes and cS the stream context, p[i] their address; Hc+k*U / Ic+k*U a host array
 * staged through device memory, written back (H) or only read (I), of c (a number, or aI: the value
 * of parameter I) plus k elements of U bytes). */
int gc_npp_send(uint32_t id, const char *kinds, uint64_t *w, const void *const *p, int n) {
    uint64_t out[GC_LIB_OUTS] = {0};
    void *outs[GC_LIB_OUTS];
    int widths[GC_LIB_OUTS], nout = 0;
    struct gc_host hb;
    hb.len = 0;
    struct gc_stage sg;
    sg.n = 0;
    const char *k = kinds;
    for (int i = 0; i < n; i++, k += strcspn(k, " "), k += *k == ' ') {
        char *e;
        switch (*k) {
        case 'v':
        case 'd':
            break;
        case 'r':
            if (!p[i]) return NPP_NULL_POINTER_ERROR;
            if (nout == GC_LIB_OUTS) return NPP_BAD_ARGUMENT_ERROR;
            widths[nout] = (int)strtol(k + 1, NULL, 10);
            outs[nout] = (void *)p[i];
            w[i] = gc_out_prior(p[i], widths[nout++]);
            break;
        case 'h': {
            long count = strtol(k + 1, &e, 10), unit = strtol(e + 1, NULL, 10);
            if (gc_host_add(&hb, p[i], count, unit, &w[i]) != 0) return NPP_BAD_ARGUMENT_ERROR;
            break;
        }
        case 'b':
            if (gc_host_add(&hb, p[i], 1, strtol(k + 1, NULL, 10), &w[i]) != 0) return NPP_BAD_ARGUMENT_ERROR;
            break;
        case 'c':
            if (gc_npp_ctx(&hb, p[i], &w[i]) != 0) return NPP_BAD_ARGUMENT_ERROR;
            break;
        case 'H':
        case 'I': {
            int64_t count;
            if (k[1] == 'a') {
                long at = strtol(k + 2, &e, 10);
                if (at < 0 || at >= n) return NPP_BAD_ARGUMENT_ERROR;
                count = (int64_t)w[at];
            } else {
                count = strtoll(k + 1, &e, 10);
            }
            long plus = strtol(e + 1, &e, 10), unit = strtol(e + 1, NULL, 10);
            int sst = sg.n == 0 ? gc_lib_ready() : 0;
            if (sst == 0) sst = gc_stage_add(&sg, (void *)p[i], count + plus, unit, *k == 'H', &w[i]);
            if (sst != 0) {
                gc_stage_done(&sg, 0);
                return sst == GC_STAGE_NOMEM ? NPP_MEMORY_ALLOCATION_ERR
                       : sst > 0             ? sst
                                             : NPP_BAD_ARGUMENT_ERROR;
            }
            break;
        }
        default:
            gc_stage_done(&sg, 0);
            return NPP_BAD_ARGUMENT_ERROR;
        }
    }
    int st = gc_lib_call(id, w, n, &hb, 0, out);
    if (gc_stage_done(&sg, st == 0) != 0 && st == 0) st = NPP_BAD_ARGUMENT_ERROR;
    if (st != 0) return st;
    for (int o = 0; o < nout; o++) gc_out_put(outs[o], widths[o], out[o]);
    return NPP_NO_ERROR;
}

/* What the generated entry points (api_gen.c) need from the hand-written driver (gencall.c).
 * Deliberately free of cuda.h: the generated functions are defined with plain C types, so they
 * never clash with the declarations the hand-written files see. */
#ifndef GPUCLOUD_API_GEN_H
#define GPUCLOUD_API_GEN_H

#include <stdint.h>
#include <string.h>

/* How a generic call travels: in the current context (it names a function, stream or event) or
 * not (device and driver queries); GC_GEN_ASYNC sends it without waiting for the reply. */
#define GC_GEN_GLOBAL 0
#define GC_GEN_CONTEXT 1
#define GC_GEN_ASYNC 2

/* Sends ApiCall{id, the nwords words of args} and, unless async, copies the reply's nparams words
 * (one per parameter: the outputs' values) into out. */
int gc_gen_call(uint16_t id, const char *name, int mode, const uint64_t *args, int nwords, uint64_t *out, int nparams);
/* The server's handles of a guest CUfunction, CUstream and CUevent (0 for NULL). */
uint64_t gc_gen_function(void *f);
uint64_t gc_gen_stream(void *s);
uint64_t gc_gen_event(void *e);
/* Whether fn is a generated stub that only refuses (api_gen.c). */
int gc_gen_refused(const void *fn);
/* Answers CUDA_ERROR_NOT_SUPPORTED for name, saying so on stderr the first time (*said). */
int gc_refused(const char *name, int *said);

static inline uint64_t gc_gen_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float gc_gen_bits_f32(uint64_t b) {
    uint32_t u = (uint32_t)b;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif

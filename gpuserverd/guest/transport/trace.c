/* GPUCLOUD_TRACE=1: an opt-in log, on stderr, of what a program asks of the driver: every
 * cuGetProcAddress lookup (name, version, flags, outcome), every cuGetExportTable id, every call
 * into an export table's entries, and every frame sent to gpuserverd. It is how we learn what
 * NVIDIA's runtime needs; it costs one branch per call when off. */
#include "guest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int trace_state = -1; /* -1 unknown, 0 off, 1 on */

int gc_trace_on(void) {
    int s = __atomic_load_n(&trace_state, __ATOMIC_RELAXED);
    if (s < 0) {
        const char *v = getenv("GPUCLOUD_TRACE");
        s = v && *v && strcmp(v, "0") != 0;
        __atomic_store_n(&trace_state, s, __ATOMIC_RELAXED);
    }
    return s;
}

void gc_trace(const char *fmt, ...) {
    if (!gc_trace_on()) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    /* One write per line, so lines from several threads do not interleave. */
    fprintf(stderr, "gpucloud-trace: %.*s\n", n, line);
}

CUresult gc_traced(const char *fn, CUresult rc) {
    if (gc_trace_on()) gc_trace("%s -> %d", fn, rc);
    return rc;
}

void gc_format_uuid(const unsigned char b[16], char out[37]) {
    static const char hex[] = "0123456789abcdef";
    int j = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[j++] = '-';
        out[j++] = hex[b[i] >> 4];
        out[j++] = hex[b[i] & 15];
    }
    out[j] = 0;
}

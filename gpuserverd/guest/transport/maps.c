/* /proc/self/maps: which kind of memory a range is. cuMemHostRegister moves a range's pages into
 * the shared arena only when they are private anonymous read-write memory (malloc'd, the heap, an
 * anonymous mmap): replacing a file mapping would cut it off from its file, a read-only or stack
 * mapping would change behaviour. No dependency on the rest of the library, so tests/maps_test.c
 * can drive the parser alone (and a Go fuzz test through it). */
#include "maps.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* number reads digits in base (16 or 10) at s[*i], at least one and no overflow. */
static int number(const char *s, size_t n, size_t *i, int base, unsigned long long *out) {
    unsigned long long v = 0;
    size_t start = *i;
    for (; *i < n; (*i)++) {
        int d = base == 16 ? hexval(s[*i]) : (s[*i] >= '0' && s[*i] <= '9' ? s[*i] - '0' : -1);
        if (d < 0) break;
        if (v > (~0ull - (unsigned)d) / (unsigned)base) return -1;
        v = v * (unsigned)base + (unsigned)d;
    }
    if (*i == start) return -1;
    *out = v;
    return 0;
}

static int expect(const char *s, size_t n, size_t *i, char c) {
    if (*i >= n || s[*i] != c) return -1;
    (*i)++;
    return 0;
}

int gc_maps_parse_line(const char *s, size_t n, struct gc_maps_entry *e) {
    size_t i = 0;
    unsigned long long lo, hi, major, minor;
    memset(e, 0, sizeof *e);
    if (number(s, n, &i, 16, &lo) || expect(s, n, &i, '-') || number(s, n, &i, 16, &hi) || hi < lo ||
        expect(s, n, &i, ' '))
        return -1;
    if (i + 4 > n) return -1;
    memcpy(e->perms, s + i, 4);
    i += 4;
    if (expect(s, n, &i, ' ') || number(s, n, &i, 16, &e->offset) || expect(s, n, &i, ' ') ||
        number(s, n, &i, 16, &major) || expect(s, n, &i, ':') || number(s, n, &i, 16, &minor) ||
        expect(s, n, &i, ' ') || number(s, n, &i, 10, &e->inode))
        return -1;
    if (i < n && s[i] != ' ') return -1;
    while (i < n && s[i] == ' ') i++;
    e->lo = (uintptr_t)lo;
    e->hi = (uintptr_t)hi;
    e->anon_dev = major == 0 && minor == 0;
    e->path = s + i;
    e->path_len = n - i;
    return 0;
}

int gc_maps_private_anon_entry(const struct gc_maps_entry *e) {
    if (memcmp(e->perms, "rw-p", 4) != 0 || e->inode != 0 || !e->anon_dev) return 0;
    if (e->path_len == 0) return 1;
    if (e->path_len == 6 && memcmp(e->path, "[heap]", 6) == 0) return 1;
    /* named anonymous memory (prctl PR_SET_VMA_ANON_NAME) */
    return e->path_len > 7 && memcmp(e->path, "[anon:", 6) == 0 && e->path[e->path_len - 1] == ']';
}

int gc_maps_check(const char *text, size_t n, uintptr_t lo, uintptr_t hi) {
    uintptr_t cur = lo;
    size_t i = 0;
    while (i < n && cur < hi) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - text) : n;
        struct gc_maps_entry e;
        if (gc_maps_parse_line(text + i, end - i, &e) != 0) return 0;
        i = end + 1;
        if (e.hi <= cur) continue;
        if (e.lo > cur || !gc_maps_private_anon_entry(&e)) return 0; /* a hole, or the wrong kind */
        cur = e.hi;
    }
    return cur >= hi;
}

int gc_maps_private_anon(uintptr_t lo, uintptr_t hi) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t cap = 64 << 10, n = 0;
    char *buf = malloc(cap);
    int ok = 0;
    while (buf) {
        if (n == cap) {
            if (cap >= (64u << 20)) break; /* absurdly many mappings: say no */
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0) break;
        if (got == 0) {
            ok = gc_maps_check(buf, n, lo, hi);
            break;
        }
        n += (size_t)got;
    }
    free(buf);
    close(fd);
    return ok;
}

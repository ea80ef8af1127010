/* The /proc/self/maps parser behind cuMemHostRegister's choice of which ranges may move into the
 * shared arena (maps.c), alone:
 *   maps_test         checks lines, coverage and this process's own memory
 *   maps_test serve   reads records (u32 length, then the bytes of one line) on stdin and prints
 *                     how each parsed, for the Go fuzz test to compare with its own reading */
#define _GNU_SOURCE
#include "../transport/maps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int fails;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            fails++;                                                        \
        }                                                                   \
    } while (0)

static int parse(const char *line, struct gc_maps_entry *e) { return gc_maps_parse_line(line, strlen(line), e); }

static int serve(void) {
    static char buf[1 << 16];
    for (;;) {
        unsigned char h[4];
        if (fread(h, 1, 4, stdin) != 4) return 0;
        size_t n = h[0] | h[1] << 8 | h[2] << 16 | (size_t)h[3] << 24;
        if (n > sizeof buf || fread(buf, 1, n, stdin) != n) return 1;
        struct gc_maps_entry e;
        if (gc_maps_parse_line(buf, n, &e) != 0) {
            printf("ERR\n");
        } else {
            printf("OK %llx %llx %02x%02x%02x%02x %llx %llu %d %zu %d\n", (unsigned long long)e.lo,
                   (unsigned long long)e.hi, (unsigned char)e.perms[0], (unsigned char)e.perms[1],
                   (unsigned char)e.perms[2], (unsigned char)e.perms[3], e.offset, e.inode, e.anon_dev,
                   e.path_len, gc_maps_private_anon_entry(&e));
        }
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "serve")) return serve();
    struct gc_maps_entry e;
    EXPECT(parse("7f0000000000-7f0000002000 rw-p 00000000 00:00 0 ", &e) == 0 && e.lo == 0x7f0000000000 &&
           e.hi == 0x7f0000002000 && e.path_len == 0 && gc_maps_private_anon_entry(&e));
    EXPECT(parse("55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]", &e) == 0 &&
           e.path_len == 6 && gc_maps_private_anon_entry(&e));
    EXPECT(parse("7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]", &e) == 0 && !gc_maps_private_anon_entry(&e));
    EXPECT(parse("7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:buffers]", &e) == 0 && gc_maps_private_anon_entry(&e));
    EXPECT(parse("7f0000000000-7f0000001000 r--p 00000000 00:00 0", &e) == 0 && !gc_maps_private_anon_entry(&e));
    EXPECT(parse("7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 /memfd:gpucloud-shm-s (deleted)", &e) == 0 &&
           !gc_maps_private_anon_entry(&e) && e.inode == 1234);
    EXPECT(parse("7f0000000000-7f0000001000 rw-p 00001000 08:01 99 /usr/lib/libc.so.6", &e) == 0 && !gc_maps_private_anon_entry(&e));
    EXPECT(parse("2000-1000 rw-p 00000000 00:00 0", &e) != 0);          /* hi below lo */
    EXPECT(parse("1000-2000 rw-p 00000000 00:00", &e) != 0);            /* no inode */
    EXPECT(parse("1000-2000 rw-p 0 00:00 0x1", &e) != 0);               /* junk after the inode */
    EXPECT(parse("10000000000000000-2 rw-p 0 00:00 0", &e) != 0);       /* overflow */
    EXPECT(parse("", &e) != 0);

    const char *maps = "1000-3000 rw-p 00000000 00:00 0\n"
                       "3000-5000 rw-p 00000000 00:00 0 [heap]\n"
                       "6000-7000 rw-p 00000000 00:00 0\n"
                       "7000-8000 rw-p 00000000 08:01 5 /tmp/f\n";
    size_t n = strlen(maps);
    EXPECT(gc_maps_check(maps, n, 0x1000, 0x5000));  /* two adjacent anonymous mappings */
    EXPECT(gc_maps_check(maps, n, 0x2000, 0x3000));
    EXPECT(!gc_maps_check(maps, n, 0x4000, 0x6001)); /* a hole */
    EXPECT(!gc_maps_check(maps, n, 0x6000, 0x7001)); /* into a file mapping */
    EXPECT(!gc_maps_check(maps, n, 0x9000, 0xa000)); /* past every mapping */
    /* A malformed line refuses the range it would have to read past; one covered before it is fine. */
    const char *bad = "1000-3000 rw-p 00000000 00:00 0\nnonsense\n";
    EXPECT(!gc_maps_check(bad, strlen(bad), 0x1000, 0x4000));
    EXPECT(gc_maps_check(bad, strlen(bad), 0x1000, 0x2000));

    /* This process: a large malloc'd buffer is private anonymous memory, a string constant and a
     * shared mapping are not. */
    size_t big = 8u << 20;
    char *m = malloc(big);
    EXPECT(m && gc_maps_private_anon((uintptr_t)m, (uintptr_t)m + big));
    static const char konst[8192] = "constant";
    EXPECT(!gc_maps_private_anon((uintptr_t)konst & ~(uintptr_t)4095, ((uintptr_t)konst & ~(uintptr_t)4095) + 4096));
    char *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT(sh != MAP_FAILED && !gc_maps_private_anon((uintptr_t)sh, (uintptr_t)sh + 4096));
    free(m);
    if (fails) return 1;
    printf("maps_test: OK\n");
    return 0;
}

/* /proc/self/maps parsing (maps.c). */
#ifndef GPUCLOUD_MAPS_H
#define GPUCLOUD_MAPS_H

#include <stddef.h>
#include <stdint.h>

struct gc_maps_entry {
    uintptr_t lo, hi;
    char perms[4];
    unsigned long long offset, inode;
    int anon_dev; /* device 00:00 */
    const char *path; /* not NUL-terminated */
    size_t path_len;
};

/* Parses one line "lo-hi perms offset major:minor inode [path]" (no newline); 0 or -1. */
int gc_maps_parse_line(const char *s, size_t n, struct gc_maps_entry *e);
/* Whether the entry is private anonymous read-write memory. */
int gc_maps_private_anon_entry(const struct gc_maps_entry *e);
/* Whether [lo, hi) is wholly covered by such entries in the maps text (lines in address order). */
int gc_maps_check(const char *text, size_t n, uintptr_t lo, uintptr_t hi);
/* The same against this process's /proc/self/maps. */
int gc_maps_private_anon(uintptr_t lo, uintptr_t hi);

#endif

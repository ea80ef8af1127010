/* cuGetProcAddress's table (procs_gen.c, generated): a name, the CUDA version from which a versioned
 * lookup gets this entry (0: the exact exported name) and the function. */
#ifndef GPUCLOUD_PROCS_H
#define GPUCLOUD_PROCS_H

struct gc_proc {
    const char *name;
    int version;
    void *fn;
};
extern const struct gc_proc gc_procs[];
extern const unsigned gc_nprocs;

#endif

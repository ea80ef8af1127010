/* Every other NVML name (exports.def), so that a program or nvidia-smi that looks one up finds
 * it: it answers NVML_ERROR_NOT_SUPPORTED, and names itself on stderr with GPUCLOUD_TRACE=1
 * (nvidia-smi asks for dozens of readings a VM has no business with; a notice each would bury its
 * output). The stubs are weak: the functions the library answers (the other files) replace them
 * at link time. No prototypes here: each stub takes no arguments, which the C calling convention
 * lets any caller pass. */
#include <stdio.h>
#include <stdlib.h>

static int unsupported(const char *name) {
    const char *t = getenv("GPUCLOUD_TRACE");
    if (t && *t == '1') fprintf(stderr, "gpucloud: NVML: %s is not supported in a gpucloud VM\n", name);
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
}

#define NVML_NAME(n)                                                                               \
    __attribute__((weak, visibility("default"))) int n(void);                                     \
    int n(void) { return unsupported(#n); }
#include "exports.def"

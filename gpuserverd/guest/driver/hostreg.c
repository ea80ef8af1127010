/* cuMemHostRegister and cuMemHostUnregister: the API's checks around the transport's registry of
 * host ranges (transport/hostreg.c), which moves their pages into a shared arena where it can. */
#include "guest.h"

#include <stdint.h>

#define KNOWN_FLAGS (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    if (!p || n == 0 || (flags & ~(unsigned)KNOWN_FLAGS) || (uintptr_t)p + n < (uintptr_t)p) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = gc_current_device(&dev); /* as in CUDA: needs a current context */
    if (rc != CUDA_SUCCESS) return rc;
    return gc_hostreg_register(p, n, flags);
}
ALIAS(cuMemHostRegister, cuMemHostRegister_v2);

/* cuMemHostUnregister of a range whose pages are in the arena first waits for the current
 * context's work (an async copy may still be reading or writing them; CUDA's own call may likewise
 * return an earlier asynchronous error), then moves the pages back. */
EXPORT CUresult cuMemHostUnregister(void *p) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc != CUDA_SUCCESS) return rc;
    CUresult sync = gc_hostreg_moved(p) ? cuCtxSynchronize() : CUDA_SUCCESS; /* unlocked: a call of its own */
    rc = gc_hostreg_unregister(p);
    return rc != CUDA_SUCCESS ? rc : sync;
}

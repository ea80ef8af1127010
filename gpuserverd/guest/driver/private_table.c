/* GPUCLOUD_PRIVATE: the export table gpucloud's own guest libraries (libcublas.so.13) reach this
 * library's session through (include/gpucloud_private.h); served by cuGetExportTable. */
#include "guest.h"

const struct gc_private_table gc_private_table = {
    .size = sizeof(struct gc_private_table),
    .abi = GC_PRIVATE_ABI,
    .wire_version = GW_VERSION,
    .wire_check = GC_PRIVATE_WIRE_CHECK,
    .request = gc_request,
    .stream_handle = gc_stream_handle,
    .current_device = gc_current_device,
    .refused = gc_gen_refused,
};

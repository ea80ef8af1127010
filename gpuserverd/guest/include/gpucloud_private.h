/* gpucloud's own export table: how gpucloud's guest libraries (libcublas.so.13, guest/cublas)
 * reach the guest libcuda's session with gpuserverd. They fetch it with
 * cuGetExportTable(GC_PRIVATE_TABLE_ID); NVIDIA's driver has no such table, so they can tell
 * that they were loaded over a libcuda that cannot serve them and say so.
 *
 * Both sides are built from the same tree: the table carries the wire version and the sizes of
 * the message structs it passes, and a library refuses a table that disagrees. Include cuda.h
 * and wire_gen.h first (wire_gen.h only where GC_PRIVATE_WIRE_CHECK is used). */
#ifndef GPUCLOUD_PRIVATE_H
#define GPUCLOUD_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

/* de27852b-182f-45d6-9d4f-2f955e2d8f8f, random: no other table has it. */
#define GC_PRIVATE_TABLE_ID                                                                        \
    { 0xde, 0x27, 0x85, 0x2b, 0x18, 0x2f, 0x45, 0xd6, 0x9d, 0x4f, 0x2f, 0x95, 0x5e, 0x2d, 0x8f, 0x8f }
#define GC_PRIVATE_ABI 1
/* The sizes of the message structs the BLAS and cuBLASLt calls encode and decode (wire_gen.h):
 * a libcublasLt newer than the libcuda that would decode its replies is refused, not served. */
#define GC_PRIVATE_WIRE_CHECK                                                                      \
    ((uint32_t)(sizeof(struct gw_blas_gemm) << 16 | sizeof(struct gw_blas_reply)) ^                \
     (uint32_t)(sizeof(struct gw_lt_heuristic_reply) << 8))

struct gc_private_table {
    size_t size; /* sizeof(struct gc_private_table) */
    uint32_t abi;
    uint32_t wire_version; /* GW_VERSION */
    uint32_t wire_check;   /* GC_PRIVATE_WIRE_CHECK */
    /* A call on the calling thread's current context's device: sends the encoded request (with
     * GW_FLAG_NO_REPLY: batched, no reply, errors surface at the next synchronising call) and
     * otherwise decodes the reply of type want into *reply, returning its result field. Only the
     * reply's fixed fields may be read afterwards. */
    CUresult (*request)(uint16_t type, uint16_t flags, const uint8_t *head, size_t n, uint16_t want, void *reply);
    /* The server's handle of a stream (0 for the default streams). */
    uint64_t (*stream_handle)(CUstream s);
    /* The ordinal of the current context's device; CUDA_ERROR_INVALID_CONTEXT without one. */
    CUresult (*current_device)(int *dev);
    /* Whether fn, an address cuGetProcAddress gave, is a stub that only answers
     * CUDA_ERROR_NOT_SUPPORTED (gpucloud's runtime then takes its own fallback, as with a driver
     * that lacks the function). Present when size covers it. */
    int (*refused)(const void *fn);
};

#endif

/* Hopper tensor maps: encoded by the worker (NVIDIA's driver there, for the device's addresses;
 * the simulator checks the parameters and encodes them its own way). Host computation, so the
 * call waits for the 128-byte answer. */
#include "families.h"

#include <string.h>

static CUresult keep_map(void *reply, void *arg) {
    const struct gw_tensor_map_reply *r = reply;
    if (r->map_len != sizeof(CUtensorMap)) return gc_transport_error("a tensor map of the wrong size");
    memcpy(arg, r->map, sizeof(CUtensorMap));
    return CUDA_SUCCESS;
}

static CUresult encode(CUtensorMap *map, struct gw_tensor_map_encode *m, const cuuint64_t *dims, const cuuint64_t *strides) {
    if (!map || !dims || (m->rank > 1 && !strides) || m->rank == 0 || m->rank > 5) return CUDA_ERROR_INVALID_VALUE;
    m->global_dim = dims, m->global_dim_len = 8 * m->rank;
    m->global_strides = strides, m->global_strides_len = 8 * (m->rank - 1);
    GC_ENCODE(tensor_map_encode, *m, b);
    struct gw_tensor_map_reply r;
    return gc_request_keep(GW_TYPE_TENSOR_MAP_ENCODE, 0, b, b_n, NULL, 0, GW_TYPE_TENSOR_MAP_REPLY, &r, keep_map, map);
}

EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                       const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                       const cuuint32_t *estrides, CUtensorMapInterleave interleave,
                                       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    if (!box || !estrides || rank == 0 || rank > 5) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_tensor_map_encode m = {.data_type = dt, .rank = rank, .address = (uint64_t)(uintptr_t)addr,
                                     .box_dim = (const uint8_t *)box, .box_dim_count = rank, .element_strides = (const uint8_t *)estrides,
                                     .element_strides_count = rank, .interleave = interleave, .swizzle = swizzle,
                                     .l2_promotion = l2, .oob_fill = oob};
    return GC_T(encode(map, &m, dims, strides));
}

EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType dt, cuuint32_t rank, void *addr,
                                        const cuuint64_t *dims, const cuuint64_t *strides, const int *lower,
                                        const int *upper, cuuint32_t cpp, cuuint32_t ppc, const cuuint32_t *estrides,
                                        CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    if (!lower || !upper || !estrides || rank < 3 || rank > 5) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_tensor_map_encode m = {.im2col = 1, .data_type = dt, .rank = rank, .address = (uint64_t)(uintptr_t)addr,
                                     .element_strides = (const uint8_t *)estrides, .element_strides_count = rank,
                                     .lower_corner = (const uint8_t *)lower, .lower_corner_count = rank - 2,
                                     .upper_corner = (const uint8_t *)upper, .upper_corner_count = rank - 2,
                                     .channels_per_pixel = cpp, .pixels_per_column = ppc, .interleave = interleave,
                                     .swizzle = swizzle, .l2_promotion = l2, .oob_fill = oob};
    return GC_T(encode(map, &m, dims, strides));
}

/* Texture and surface objects, made by the worker from the resource they name. */
#include "families.h"

#include <string.h>

/* The wire's view of a CUDA_RESOURCE_DESC (arrays by id, memory by address). */
static CUresult resource(const CUDA_RESOURCE_DESC *r, struct gw_tex_object_create *m) {
    m->res_type = r->resType;
    m->res_flags = r->flags;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY: m->handle = GC_ID(r->res.array.hArray); break;
    case CU_RESOURCE_TYPE_LINEAR:
        m->handle = r->res.linear.devPtr, m->format = r->res.linear.format;
        m->channels = r->res.linear.numChannels, m->size_bytes = r->res.linear.sizeInBytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        m->handle = r->res.pitch2D.devPtr, m->format = r->res.pitch2D.format;
        m->channels = r->res.pitch2D.numChannels, m->width = r->res.pitch2D.width;
        m->height = r->res.pitch2D.height, m->pitch = r->res.pitch2D.pitchInBytes;
        break;
    default: return CUDA_ERROR_NOT_SUPPORTED; /* mipmapped arrays are not offered */
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuTexObjectCreate(CUtexObject *obj, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                                  const CUDA_RESOURCE_VIEW_DESC *view) {
    if (!obj || !res || !tex) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_tex_object_create m = {.tex_desc = tex, .tex_desc_len = sizeof *tex, .view_desc = view,
                                     .view_desc_len = view ? sizeof *view : 0};
    CUresult rc = resource(res, &m);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    GC_ENCODE(tex_object_create, m, b);
    uint64_t h;
    rc = gc_handle_call(GW_TYPE_TEX_OBJECT_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *obj = h;
    return GC_T(rc);
}

EXPORT CUresult cuTexObjectDestroy(CUtexObject obj) {
    struct gw_tex_object_destroy m = {.object = obj};
    GC_ENCODE(tex_object_destroy, m, b);
    return GC_T(gc_call_status(GW_TYPE_TEX_OBJECT_DESTROY, 0, b, b_n));
}

EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject obj) {
    if (!res) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_tex_object_get_resource_desc m = {.object = obj};
    GC_ENCODE(tex_object_get_resource_desc, m, b);
    struct gw_resource_desc_reply r;
    CUresult rc = gc_request(GW_TYPE_TEX_OBJECT_GET_RESOURCE_DESC, 0, b, b_n, GW_TYPE_RESOURCE_DESC_REPLY, &r);
    if (rc != CUDA_SUCCESS) return GC_T(rc);
    memset(res, 0, sizeof *res);
    res->resType = (CUresourcetype)r.res_type;
    res->flags = r.res_flags;
    switch (r.res_type) {
    case CU_RESOURCE_TYPE_ARRAY: res->res.array.hArray = GC_PTR(CUarray, r.handle); break;
    case CU_RESOURCE_TYPE_LINEAR:
        res->res.linear.devPtr = r.handle, res->res.linear.format = (CUarray_format)r.format;
        res->res.linear.numChannels = r.channels, res->res.linear.sizeInBytes = r.size_bytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        res->res.pitch2D.devPtr = r.handle, res->res.pitch2D.format = (CUarray_format)r.format;
        res->res.pitch2D.numChannels = r.channels, res->res.pitch2D.width = r.width;
        res->res.pitch2D.height = r.height, res->res.pitch2D.pitchInBytes = r.pitch;
        break;
    }
    return GC_T(CUDA_SUCCESS);
}

EXPORT CUresult cuSurfObjectCreate(CUsurfObject *obj, const CUDA_RESOURCE_DESC *res) {
    if (!obj || !res) return GC_T(CUDA_ERROR_INVALID_VALUE);
    if (res->resType != CU_RESOURCE_TYPE_ARRAY) return GC_T(CUDA_ERROR_INVALID_VALUE);
    struct gw_surf_object_create m = {.res_type = res->resType, .handle = GC_ID(res->res.array.hArray)};
    GC_ENCODE(surf_object_create, m, b);
    uint64_t h;
    CUresult rc = gc_handle_call(GW_TYPE_SURF_OBJECT_CREATE, b, b_n, &h);
    if (rc == CUDA_SUCCESS) *obj = h;
    return GC_T(rc);
}

EXPORT CUresult cuSurfObjectDestroy(CUsurfObject obj) {
    struct gw_surf_object_destroy m = {.object = obj};
    GC_ENCODE(surf_object_destroy, m, b);
    return GC_T(gc_call_status(GW_TYPE_SURF_OBJECT_DESTROY, 0, b, b_n));
}

/* cuLaunchKernelEx with attributes and cooperative launches: a launch that carries the attributes
 * gpucloud forwards (cooperative, cluster dimensions, priority) or may drop as hints (programmatic
 * stream serialization, access policy, sync policy, memory-sync domain); others are refused. */
#include "families.h"

#include "driver/coherence.h"

static CUresult launch_ex(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, CUstream s, void **params, void **extra, const CUlaunchAttribute *attrs,
                          unsigned nattrs) {
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    if (nattrs && !attrs) return CUDA_ERROR_INVALID_VALUE;
    struct gw_launch_kernel_ex m = {.function = f->handle, .grid_x = gx, .grid_y = gy, .grid_z = gz,
                                    .block_x = bx, .block_y = by, .block_z = bz, .shared_mem = shared,
                                    .stream = gc_stream_handle(s)};
    for (unsigned i = 0; i < nattrs; i++) {
        const CUlaunchAttribute *a = &attrs[i];
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE: break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: m.cooperative = a->value.cooperative != 0; break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            m.cluster_x = a->value.clusterDim.x, m.cluster_y = a->value.clusterDim.y, m.cluster_z = a->value.clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY: m.priority = a->value.priority; break;
        /* Hints whose absence leaves the results as they are: programmatic stream serialization
         * only lets this kernel start before the previous one ends (thrust and CUB ask for it on
         * every sort; without it the launch is ordered as any other, and the device's
         * cudaGridDependencySynchronize returns at once), and the access-policy window,
         * synchronization policy and memory-sync domain tune caching and waiting. */
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: break;
        default:
            if (gc_trace_on()) gc_trace("cuLaunchKernelEx: launch attribute %d is not forwarded", (int)a->id);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    int dev;
    CUresult rc = gc_current_device(&dev);
    if (rc == CUDA_SUCCESS) rc = gc_promote_params(f, params, extra); /* pinned memory a kernel may see */
    if (rc == CUDA_SUCCESS) rc = gc_coh_before(GW_TYPE_LAUNCH_KERNEL_EX); /* managed memory goes to the device */
    if (rc != CUDA_SUCCESS) return rc;
    uint8_t packed[32768];
    const void *pbuf = packed;
    size_t plen = 0;
    pthread_mutex_lock(&gc.mu);
    rc = gc_select_device_locked(dev);
    if (rc == CUDA_SUCCESS) rc = gc_pack_params_locked(f, params, extra, packed, &pbuf, &plen);
    if (rc == CUDA_SUCCESS) {
        m.params = pbuf, m.params_len = (uint32_t)plen;
        uint8_t head[96];
        uint8_t *end = gw_launch_kernel_ex_encode_head(&m, head);
        /* Asynchronous like cuLaunchKernel: errors surface at the next synchronising call; but a
         * cooperative launch that cannot fit is refused at once, as the driver does. */
        struct gc_reply r;
        rc = gc_xfer_locked(GW_TYPE_LAUNCH_KERNEL_EX, m.cooperative ? 0 : GW_FLAG_NO_REPLY, head, end - head, pbuf,
                            plen, GW_TYPE_STATUS, &r);
        struct gw_status st;
        char err[160];
        if (rc == CUDA_SUCCESS && m.cooperative) {
            if (gw_status_decode(&st, r.p, r.n, err, sizeof err) != 0) rc = gc_transport_error(err);
            else rc = (CUresult)st.result;
        }
    }
    pthread_mutex_unlock(&gc.mu);
    return rc;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    if (!c) return GC_T(CUDA_ERROR_INVALID_VALUE);
    return GC_T(launch_ex(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                          c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs));
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, CUstream s, void **params) {
    CUlaunchAttribute coop = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1};
    return GC_T(launch_ex(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL, &coop, 1));
}

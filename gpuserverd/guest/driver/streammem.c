/* Stream memory operations: a stream waits for, or writes, a word of device memory, in order with
 * its other work. Sent without waiting, like a launch. The _v2 and the first forms share their
 * signatures. A batch is sent as its operations, in order; barriers and remote-write flushes are
 * implied by the worker's ordering and need no frame. */
#include "families.h"

static CUresult mem_op(CUstream s, uint32_t op, CUdeviceptr addr, uint64_t value, unsigned flags) {
    struct gw_stream_mem_op m = {.stream = gc_stream_handle(s), .op = op, .addr = addr, .value = value, .flags = flags};
    GC_ENCODE(stream_mem_op, m, b);
    return gc_call_status(GW_TYPE_STREAM_MEM_OP, GW_FLAG_NO_REPLY, b, b_n);
}

EXPORT CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f) { return GC_T(mem_op(s, 1, a, v, f)); }
EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f) { return GC_T(mem_op(s, 2, a, v, f)); }
EXPORT CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f) { return GC_T(mem_op(s, 3, a, v, f)); }
EXPORT CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f) { return GC_T(mem_op(s, 4, a, v, f)); }
ALIAS(cuStreamWaitValue32, cuStreamWaitValue32_v2);
ALIAS(cuStreamWriteValue32, cuStreamWriteValue32_v2);
ALIAS(cuStreamWaitValue64, cuStreamWaitValue64_v2);
ALIAS(cuStreamWriteValue64, cuStreamWriteValue64_v2);

EXPORT CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags) {
    if (flags || (count && !ops)) return GC_T(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = CUDA_SUCCESS;
    for (unsigned i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        const CUstreamBatchMemOpParams *p = &ops[i];
        switch (p->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
            rc = mem_op(s, 1, p->waitValue.address, p->waitValue.value, p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            rc = mem_op(s, 2, p->writeValue.address, p->writeValue.value, p->writeValue.flags);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            rc = mem_op(s, 3, p->waitValue.address, p->waitValue.value64, p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            rc = mem_op(s, 4, p->writeValue.address, p->writeValue.value64, p->writeValue.flags);
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        case CU_STREAM_MEM_OP_BARRIER: break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    return GC_T(rc);
}
ALIAS(cuStreamBatchMemOp, cuStreamBatchMemOp_v2);

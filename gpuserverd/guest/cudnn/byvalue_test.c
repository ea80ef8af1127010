/* byvalue_test: which elements of a variant pack byvalue.c sends as values (guesttest/
 * cudnn_test.go, TestCudnnByValueIDs). Built with byvalue.c alone and a stand-in for the guest
 * libcuda's pointer query, which calls [DEVICE_LO, DEVICE_HI) device memory: an element there is
 * never read here (the range is not mapped in this process, so a read would end it).
 *
 * The call sequence is PyTorch's cuDNN attention as the cuDNN frontend makes it: the forward
 * graph's own by-value scalar takes id 9, which the backward graph then gives dO, a device tensor;
 * then the forward runs again. */
#include "internal.h"

#include "../tests/check.h"

#define DEVICE_LO 0x7e0000000000ull
#define DEVICE_HI 0x7e0100000000ull

CUresult cuGetErrorName(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "an error";
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    EXPECT(a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
    *(unsigned *)data = p >= DEVICE_LO && p < DEVICE_HI ? CU_MEMORYTYPE_DEVICE : 0;
    return CUDA_SUCCESS;
}

/* cuDNN's values (cudnn_graph.h); the shim declares only what the library itself names. */
enum { KIND_PACK = 16, KIND_TENSOR = 17, UID = 906, BY_VALUE = 908, DATA_TYPE = 901, PACK_UIDS = 1000 };
enum { TYPE_DATA_TYPE = 1, DATA_FLOAT = 0, DATA_BFLOAT16 = 9, DATA_INT64 = 10 };

/* tensor finalizes a tensor descriptor with uid, by value or not, of cuDNN data type dtype. */
static void tensor(int64_t uid, int by_value, int32_t dtype) {
    struct gc_bv bv = {0};
    uint8_t yes = (uint8_t)by_value;
    gc_bv_note(&bv, KIND_TENSOR, UID, CUDNN_TYPE_INT64, 1, &uid);
    gc_bv_note(&bv, KIND_TENSOR, BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    gc_bv_note(&bv, KIND_TENSOR, DATA_TYPE, (cudnnBackendAttributeType_t)TYPE_DATA_TYPE, 1, &dtype);
    gc_bv_finalized(&bv, KIND_TENSOR);
    gc_bv_free(&bv);
}

struct elem {
    uint64_t len, word;
};

/* pack sets a variant pack's pointers and ids and returns what its finalize sends in place of
 * the pointers (NULL: the pointers as they are). */
static struct elem *pack(int n, void **ptrs, int64_t *uids) {
    struct gc_bv bv = {0};
    gc_bv_note(&bv, KIND_PACK, GC_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    gc_bv_note(&bv, KIND_PACK, PACK_UIDS, CUDNN_TYPE_INT64, n, uids);
    int64_t count = 0;
    struct elem *e = (struct elem *)gc_bv_pack_values(&bv, KIND_PACK, &count);
    EXPECT(!e || count == n);
    unsigned type; /* the stand-in answers as the guest libcuda does */
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, DEVICE_LO));
    EXPECT(type == CU_MEMORYTYPE_DEVICE);
    EXPECT(!e || bv.substituted);
    gc_bv_free(&bv);
    return e;
}

int main(void) {
    enum { Q = 0, K = 1, V = 2, O = 3, SCALE = 5, DO = 9, DQ = 10 };
    void *q = (void *)(DEVICE_LO + 0x1000), *dO = (void *)(DEVICE_LO + 0x2000), *dq = (void *)(DEVICE_LO + 0x3000);
    float scale = 0.125f, neg_inf = -3.4e38f;

    /* forward graph: torch's scale (5) and the frontend's -inf (9, the first id torch left free) */
    tensor(Q, 0, DATA_BFLOAT16);
    tensor(SCALE, 1, DATA_FLOAT);
    tensor(DO, 1, DATA_FLOAT);
    void *fwd[3] = {q, &scale, &neg_inf};
    int64_t fwd_ids[3] = {Q, SCALE, DO};
    struct elem *e = pack(3, fwd, fwd_ids);
    EXPECT(e && e[0].len == 0 && e[0].word == (uint64_t)(uintptr_t)q);
    float f;
    EXPECT(e[1].len == 4 && (memcpy(&f, &e[1].word, 4), f == scale));
    EXPECT(e[2].len == 4 && (memcpy(&f, &e[2].word, 4), f == neg_inf));
    free(e);

    /* backward graph: id 9 is dO, on the device; its pack sends the device address as it is,
     * and does not read it here */
    tensor(DO, 0, DATA_BFLOAT16);
    tensor(DQ, 0, DATA_BFLOAT16);
    tensor(SCALE, 1, DATA_FLOAT);
    void *bwd[3] = {dO, dq, &scale};
    int64_t bwd_ids[3] = {DO, DQ, SCALE};
    e = pack(3, bwd, bwd_ids);
    EXPECT(e && e[0].len == 0 && e[0].word == (uint64_t)(uintptr_t)dO && e[1].len == 0 && e[2].len == 4);
    free(e);

    /* the forward again: id 9 is still the -inf scalar there, read here, not sent as an address */
    e = pack(3, fwd, fwd_ids);
    EXPECT(e && e[2].len == 4 && (memcpy(&f, &e[2].word, 4), f == neg_inf));
    free(e);

    /* device addresses only, under ids once by value: nothing is substituted */
    void *dev[2] = {dO, q};
    int64_t dev_ids[2] = {DO, SCALE};
    EXPECT(pack(2, dev, dev_ids) == NULL);

    /* an id never by value keeps its pointer, host or not; a NULL pointer is not read */
    int64_t host_word = 7;
    void *plain[2] = {&host_word, NULL};
    int64_t plain_ids[2] = {1234, DO};
    EXPECT(pack(2, plain, plain_ids) == NULL);

    /* an 8-byte scalar under an id that was 4 bytes elsewhere: its 8 bytes go */
    int64_t seed = 0x1122334455667788ll;
    tensor(DO, 1, DATA_INT64);
    void *s[1] = {&seed};
    int64_t s_ids[1] = {DO};
    e = pack(1, s, s_ids);
    EXPECT(e && e[0].len == 8 && e[0].word == (uint64_t)seed);
    free(e);

    /* pointers and ids that disagree in number: left to cuDNN, which refuses such a pack */
    struct gc_bv bv = {0};
    gc_bv_note(&bv, KIND_PACK, GC_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, fwd);
    gc_bv_note(&bv, KIND_PACK, PACK_UIDS, CUDNN_TYPE_INT64, 2, fwd_ids);
    int64_t count = 0;
    EXPECT(gc_bv_pack_values(&bv, KIND_PACK, &count) == NULL);
    gc_bv_free(&bv);

    printf("byvalue_test: OK\n");
    return 0;
}

/* gpucloud's libcudnn.so.9: the calls in PyTorch's list that are not forwarded (RNN, CTC loss,
 * spatial transformer, dropout states, the benchmarking Find calls, the fused convolution).
 * Their descriptors can be made and destroyed, so a program's set-up and tear-down run; the
 * calls themselves answer CUDNN_STATUS_NOT_SUPPORTED with a one-time notice naming them on
 * stderr, and PyTorch reports that status. */
#include "internal.h"

#include <stdlib.h>

/* The not-forwarded calls name their parameters (for the signature check) but read none. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define OPAQUE_MAGIC 0x67636f70u

struct opaque {
    uint32_t magic;
};
struct cudnnDropoutStruct { struct opaque o; };
struct cudnnRNNStruct { struct opaque o; };
struct cudnnRNNDataStruct { struct opaque o; };
struct cudnnCTCLossStruct { struct opaque o; };
struct cudnnSpatialTransformerStruct { struct opaque o; };

static cudnnStatus_t create(void **out) {
    if (!out) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    struct opaque *o = calloc(1, sizeof *o);
    if (!o) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    o->magic = OPAQUE_MAGIC;
    *out = o;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t destroy(void *p) {
    struct opaque *o = p;
    if (!o) return CUDNN_STATUS_SUCCESS;
    if (o->magic != OPAQUE_MAGIC) return CUDNN_STATUS_BAD_PARAM;
    o->magic = 0;
    free(o);
    return CUDNN_STATUS_SUCCESS;
}

#define OPAQUE(Name, type)                                                                          \
    EXPORT cudnnStatus_t cudnnCreate##Name##Descriptor(type *d) { return create((void **)d); }       \
    EXPORT cudnnStatus_t cudnnDestroy##Name##Descriptor(type d) { return destroy(d); }
OPAQUE(Dropout, cudnnDropoutDescriptor_t)
OPAQUE(RNN, cudnnRNNDescriptor_t)
OPAQUE(RNNData, cudnnRNNDataDescriptor_t)
OPAQUE(CTCLoss, cudnnCTCLossDescriptor_t)
OPAQUE(SpatialTransformer, cudnnSpatialTransformerDescriptor_t)

#define NOT_FORWARDED(name, params) \
    EXPORT cudnnStatus_t name params { UNSUPPORTED(#name); }

NOT_FORWARDED(cudnnSetDropoutDescriptor, (cudnnDropoutDescriptor_t d, cudnnHandle_t h, float p, void *s, size_t n, unsigned long long seed))
NOT_FORWARDED(cudnnRestoreDropoutDescriptor, (cudnnDropoutDescriptor_t d, cudnnHandle_t h, float p, void *s, size_t n, unsigned long long seed))
NOT_FORWARDED(cudnnSetRNNDescriptor_v8, (cudnnRNNDescriptor_t d, cudnnRNNAlgo_t a, cudnnRNNMode_t m, cudnnRNNBiasMode_t b,
                                         cudnnDirectionMode_t dir, cudnnRNNInputMode_t in, cudnnDataType_t dt, cudnnDataType_t mp,
                                         cudnnMathType_t mt, int32_t is, int32_t hs, int32_t ps, int32_t nl, cudnnDropoutDescriptor_t dd,
                                         uint32_t aux))
NOT_FORWARDED(cudnnSetRNNDataDescriptor, (cudnnRNNDataDescriptor_t d, cudnnDataType_t dt, cudnnRNNDataLayout_t l, int maxSeq, int batch,
                                          int vec, const int seq[], void *fill))
NOT_FORWARDED(cudnnGetRNNTempSpaceSizes, (cudnnHandle_t h, cudnnRNNDescriptor_t d, cudnnForwardMode_t m, cudnnRNNDataDescriptor_t x,
                                          size_t *ws, size_t *rs))
NOT_FORWARDED(cudnnGetRNNWeightParams, (cudnnHandle_t h, cudnnRNNDescriptor_t d, int32_t layer, size_t wss, const void *w, int32_t lin,
                                        cudnnTensorDescriptor_t md, void **ma, cudnnTensorDescriptor_t bd, void **ba))
NOT_FORWARDED(cudnnGetRNNWeightSpaceSize, (cudnnHandle_t h, cudnnRNNDescriptor_t d, size_t *n))
NOT_FORWARDED(cudnnRNNForward, (cudnnHandle_t h, cudnnRNNDescriptor_t d, cudnnForwardMode_t m, const int32_t seq[], cudnnRNNDataDescriptor_t xd,
                                const void *x, cudnnRNNDataDescriptor_t yd, void *y, cudnnTensorDescriptor_t hd, const void *hx, void *hy,
                                cudnnTensorDescriptor_t cd, const void *cx, void *cy, size_t wss, const void *w, size_t wks, void *wk,
                                size_t rss, void *rs))
NOT_FORWARDED(cudnnRNNBackwardData_v8, (cudnnHandle_t h, cudnnRNNDescriptor_t d, const int32_t seq[], cudnnRNNDataDescriptor_t yd,
                                        const void *y, const void *dy, cudnnRNNDataDescriptor_t xd, void *dx, cudnnTensorDescriptor_t hd,
                                        const void *hx, const void *dhy, void *dhx, cudnnTensorDescriptor_t cd, const void *cx,
                                        const void *dcy, void *dcx, size_t wss, const void *w, size_t wks, void *wk, size_t rss, void *rs))
NOT_FORWARDED(cudnnRNNBackwardWeights_v8, (cudnnHandle_t h, cudnnRNNDescriptor_t d, cudnnWgradMode_t add, const int32_t seq[],
                                           cudnnRNNDataDescriptor_t xd, const void *x, cudnnTensorDescriptor_t hd, const void *hx,
                                           cudnnRNNDataDescriptor_t yd, const void *y, size_t wss, void *dw, size_t wks, void *wk,
                                           size_t rss, void *rs))
NOT_FORWARDED(cudnnSetCTCLossDescriptorEx, (cudnnCTCLossDescriptor_t d, cudnnDataType_t t, cudnnLossNormalizationMode_t n, cudnnNanPropagation_t g))
NOT_FORWARDED(cudnnSetCTCLossDescriptor_v9, (cudnnCTCLossDescriptor_t d, cudnnDataType_t t, cudnnLossNormalizationMode_t n,
                                             cudnnCTCGradMode_t g, int maxLabel))
NOT_FORWARDED(cudnnGetCTCLossWorkspaceSize, (cudnnHandle_t h, const cudnnTensorDescriptor_t pd, const cudnnTensorDescriptor_t gd,
                                             const int *labels, const int *lens, const int *ins, cudnnCTCLossAlgo_t a,
                                             cudnnCTCLossDescriptor_t cd, size_t *n))
NOT_FORWARDED(cudnnGetCTCLossWorkspaceSize_v8, (cudnnHandle_t h, cudnnCTCLossAlgo_t a, cudnnCTCLossDescriptor_t cd,
                                                const cudnnTensorDescriptor_t pd, const cudnnTensorDescriptor_t gd, size_t *n))
NOT_FORWARDED(cudnnCTCLoss, (cudnnHandle_t h, const cudnnTensorDescriptor_t pd, const void *probs, const int labels[], const int lens[],
                             const int ins[], void *costs, const cudnnTensorDescriptor_t gd, void *grads, cudnnCTCLossAlgo_t a,
                             cudnnCTCLossDescriptor_t cd, void *ws, size_t n))
NOT_FORWARDED(cudnnCTCLoss_v8, (cudnnHandle_t h, cudnnCTCLossAlgo_t a, cudnnCTCLossDescriptor_t cd, const cudnnTensorDescriptor_t pd,
                                const void *probs, const int labels[], const int lens[], const int ins[], void *costs,
                                const cudnnTensorDescriptor_t gd, void *grads, size_t n, void *ws))
NOT_FORWARDED(cudnnSetSpatialTransformerNdDescriptor, (cudnnSpatialTransformerDescriptor_t d, cudnnSamplerType_t s, cudnnDataType_t t,
                                                       const int nb, const int dims[]))
NOT_FORWARDED(cudnnSpatialTfGridGeneratorForward, (cudnnHandle_t h, const cudnnSpatialTransformerDescriptor_t d, const void *theta, void *grid))
NOT_FORWARDED(cudnnSpatialTfGridGeneratorBackward, (cudnnHandle_t h, const cudnnSpatialTransformerDescriptor_t d, const void *dgrid, void *dtheta))
NOT_FORWARDED(cudnnSpatialTfSamplerForward, (cudnnHandle_t h, cudnnSpatialTransformerDescriptor_t d, const void *alpha,
                                             const cudnnTensorDescriptor_t xd, const void *x, const void *grid, const void *beta,
                                             cudnnTensorDescriptor_t yd, void *y))
NOT_FORWARDED(cudnnSpatialTfSamplerBackward, (cudnnHandle_t h, cudnnSpatialTransformerDescriptor_t d, const void *alpha,
                                              const cudnnTensorDescriptor_t xd, const void *x, const void *beta,
                                              const cudnnTensorDescriptor_t dxd, void *dx, const void *alpha_dgrid,
                                              const cudnnTensorDescriptor_t dyd, const void *dy, const void *grid,
                                              const void *beta_dgrid, void *dgrid))
NOT_FORWARDED(cudnnFindConvolutionForwardAlgorithmEx, (cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                       const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                                       const cudnnTensorDescriptor_t yd, void *y, const int req, int *ret,
                                                       cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t n))
NOT_FORWARDED(cudnnFindConvolutionBackwardDataAlgorithmEx, (cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
                                                            const cudnnTensorDescriptor_t dyd, const void *dy,
                                                            const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
                                                            void *dx, const int req, int *ret, cudnnConvolutionBwdDataAlgoPerf_t *perf,
                                                            void *ws, size_t n))
NOT_FORWARDED(cudnnFindConvolutionBackwardFilterAlgorithmEx, (cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                              const cudnnTensorDescriptor_t dyd, const void *y,
                                                              const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd,
                                                              void *dw, const int req, int *ret, cudnnConvolutionBwdFilterAlgoPerf_t *perf,
                                                              void *ws, size_t n))
NOT_FORWARDED(cudnnConvolutionBiasActivationForward, (cudnnHandle_t h, const void *alpha1, const cudnnTensorDescriptor_t xd, const void *x,
                                                      const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t n, const void *alpha2,
                                                      const cudnnTensorDescriptor_t zd, const void *z, const cudnnTensorDescriptor_t bd,
                                                      const void *bias, const cudnnActivationDescriptor_t ad,
                                                      const cudnnTensorDescriptor_t yd, void *y))

/* gpucloud's libcufft.so.12: the plan calls of int dimensions, made from the 64-bit many-plan
 * call the server answers (cufftMakePlanMany64), as cuFFT defines them: a 1-D, 2-D or 3-D plan is
 * the many-plan of that rank with the basic data layout (no embeddings). */
#include "internal.h"

/* widen copies rank ints into long longs (NULL stays NULL). */
static long long *widen(const int *v, int rank, long long *out) {
    if (!v) return NULL;
    for (int i = 0; i < rank; i++) out[i] = v[i];
    return out;
}

static int check_rank(int rank) { return rank >= 1 && rank <= 3 ? CUFFT_SUCCESS : CUFFT_INVALID_SIZE; }

/* The 64-bit many-plan calls the server answers: cufftMakePlanMany64, cufftGetSizeMany64. */
typedef int many64(int plan, int rank, void *n, void *inembed, int64_t istride, int64_t idist, void *onembed,
                   int64_t ostride, int64_t odist, int type, int64_t batch, void *workSize);

/* via64 is an int many-plan call made through its 64-bit form. */
static int via64(many64 *f, int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                 int odist, int type, int batch, size_t *workSize) {
    if (check_rank(rank) != CUFFT_SUCCESS || !n) return CUFFT_INVALID_SIZE;
    long long ln[3], li[3], lo[3];
    return f(plan, rank, widen(n, rank, ln), widen(inembed, rank, li), istride, idist, widen(onembed, rank, lo), ostride,
             odist, type, batch, workSize);
}

EXPORT int cufftMakePlanMany(int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                             int odist, int type, int batch, size_t *workSize) {
    return via64(gcr_cufftMakePlanMany64, plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
                 workSize);
}

EXPORT int cufftMakePlan1d(int plan, int nx, int type, int batch, size_t *workSize) {
    return cufftMakePlanMany(plan, 1, &nx, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

EXPORT int cufftMakePlan2d(int plan, int nx, int ny, int type, size_t *workSize) {
    int n[2] = {nx, ny};
    return cufftMakePlanMany(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

EXPORT int cufftMakePlan3d(int plan, int nx, int ny, int nz, int type, size_t *workSize) {
    int n[3] = {nx, ny, nz};
    return cufftMakePlanMany(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

/* made finishes a cufftPlan*: the plan is handed out only once it was made. */
static int made(int *plan, int h, int st) {
    if (st != CUFFT_SUCCESS) {
        gcr_cufftDestroy(h);
        return st;
    }
    *plan = h;
    return CUFFT_SUCCESS;
}

EXPORT int cufftPlanMany(int *plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                         int odist, int type, int batch) {
    if (!plan) return CUFFT_INVALID_VALUE;
    int h, st = gcr_cufftCreate(&h);
    if (st != CUFFT_SUCCESS) return st;
    size_t ws;
    return made(plan, h, cufftMakePlanMany(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, &ws));
}

EXPORT int cufftPlan1d(int *plan, int nx, int type, int batch) {
    return cufftPlanMany(plan, 1, &nx, NULL, 1, 0, NULL, 1, 0, type, batch);
}

EXPORT int cufftPlan2d(int *plan, int nx, int ny, int type) {
    int n[2] = {nx, ny};
    return cufftPlanMany(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}

EXPORT int cufftPlan3d(int *plan, int nx, int ny, int nz, int type) {
    int n[3] = {nx, ny, nz};
    return cufftPlanMany(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}

EXPORT int cufftGetSizeMany(int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                            int odist, int type, int batch, size_t *workSize) {
    return via64(gcr_cufftGetSizeMany64, plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
                 workSize);
}

EXPORT int cufftGetSize1d(int plan, int nx, int type, int batch, size_t *workSize) {
    return cufftGetSizeMany(plan, 1, &nx, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

EXPORT int cufftGetSize2d(int plan, int nx, int ny, int type, size_t *workSize) {
    int n[2] = {nx, ny};
    return cufftGetSizeMany(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

EXPORT int cufftGetSize3d(int plan, int nx, int ny, int nz, int type, size_t *workSize) {
    int n[3] = {nx, ny, nz};
    return cufftGetSizeMany(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

EXPORT int cufftEstimate1d(int nx, int type, int batch, size_t *workSize) {
    return gcr_cufftEstimateMany(1, &nx, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

EXPORT int cufftEstimate2d(int nx, int ny, int type, size_t *workSize) {
    int n[2] = {nx, ny};
    return gcr_cufftEstimateMany(2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

EXPORT int cufftEstimate3d(int nx, int ny, int nz, int type, size_t *workSize) {
    int n[3] = {nx, ny, nz};
    return gcr_cufftEstimateMany(3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

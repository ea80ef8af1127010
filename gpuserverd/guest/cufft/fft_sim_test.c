/* fft_sim_test: gpucloud's libcufft.so.12 over the guest libcuda and a real gpuserverd on the
 * simulated backend (guesttest/mathlibs_test.go): 1-D batched complex transforms both ways, a 2-D
 * real-to-complex plan and a cufftXtMakePlanMany plan on a stream, each checked against a CPU
 * DFT; bad plans and a refused call. Declares the cuFFT functions it uses (CI has no cufft.h). */
#include <cuda.h>
#include <math.h>
#include <string.h>

#include "gc_test_check.h"

typedef int cufftHandle;
enum { CUFFT_INVALID_PLAN = 1, CUFFT_NOT_SUPPORTED = 16, R2C = 0x2a, C2C = 0x29, FORWARD = -1, INVERSE = 1, C_32F = 4 };
int cufftPlan1d(cufftHandle *plan, int nx, int type, int batch);
int cufftPlanMany(cufftHandle *plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed, int ostride,
                  int odist, int type, int batch);
int cufftCreate(cufftHandle *plan);
int cufftXtMakePlanMany(cufftHandle plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
                        int inputtype, long long *onembed, long long ostride, long long odist, int outputtype,
                        long long batch, size_t *workSize, int executiontype);
int cufftExecC2C(cufftHandle plan, void *in, void *out, int direction);
int cufftExecR2C(cufftHandle plan, void *in, void *out);
int cufftXtExec(cufftHandle plan, void *in, void *out, int direction);
int cufftSetStream(cufftHandle plan, void *stream);
int cufftGetSize(cufftHandle plan, size_t *size);
int cufftDestroy(cufftHandle plan);
int cufftGetVersion(int *version);
int cufftXtSetCallback(cufftHandle plan, void **routine, int type, void **info);

/* dft is the CPU's transform of a row-major complex array of rank dims (sign -1 forward). */
static void dft(const float *in, double *out, const int *dims, int rank, int sign) {
    int total = 1;
    for (int i = 0; i < rank; i++) total *= dims[i];
    for (int k = 0; k < total; k++) {
        double re = 0, im = 0;
        for (int j = 0; j < total; j++) {
            double phase = 0;
            int kk = k, jj = j, stride = total;
            for (int d = 0; d < rank; d++) {
                stride /= dims[d];
                int kd = kk / stride, jd = jj / stride;
                kk %= stride, jj %= stride;
                phase += (double)kd * jd / dims[d];
            }
            double a = sign * 2 * M_PI * phase;
            re += in[2 * j] * cos(a) - in[2 * j + 1] * sin(a);
            im += in[2 * j] * sin(a) + in[2 * j + 1] * cos(a);
        }
        out[2 * k] = re, out[2 * k + 1] = im;
    }
}

static CUdeviceptr upload(const void *p, size_t n) {
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(d, p, n) == CUDA_SUCCESS);
    return d;
}

static void near(const float *got, const double *want, int n, double scale) {
    for (int i = 0; i < n; i++)
        if (fabs(got[i] - want[i] * scale) > 1e-4 * (1 + fabs(want[i] * scale))) {
            fprintf(stderr, "element %d: %g, want %g\n", i, got[i], want[i] * scale);
            CHECK(0);
        }
}

/* Two 8-point transforms, forward then back: the round trip is 8 times the input. */
static void c2c_1d(void) {
    enum { N = 8, B = 2 };
    float x[2 * N * B], y[2 * N * B], z[2 * N * B];
    double want[2 * N];
    for (int i = 0; i < 2 * N * B; i++) x[i] = sinf(0.7f * i) + 0.25f * (i % 3);
    CUdeviceptr dx = upload(x, sizeof x), dy;
    CHECK(cuMemAlloc(&dy, sizeof y) == CUDA_SUCCESS);
    cufftHandle p;
    OK(cufftPlan1d(&p, N, C2C, B));
    size_t ws = 1;
    OK(cufftGetSize(p, &ws));
    OK(cufftExecC2C(p, (void *)dx, (void *)dy, FORWARD));
    CHECK(cuMemcpyDtoH(y, dy, sizeof y) == CUDA_SUCCESS);
    int dims[1] = {N};
    for (int b = 0; b < B; b++) {
        dft(x + 2 * N * b, want, dims, 1, -1);
        near(y + 2 * N * b, want, 2 * N, 1);
    }
    OK(cufftExecC2C(p, (void *)dy, (void *)dy, INVERSE)); /* in place */
    CHECK(cuMemcpyDtoH(z, dy, sizeof z) == CUDA_SUCCESS);
    for (int i = 0; i < 2 * N * B; i++) CHECK(fabsf(z[i] - N * x[i]) < 1e-3f);
    OK(cufftDestroy(p));
    CHECK(cufftDestroy(p) == CUFFT_INVALID_PLAN);
}

/* A 4x6 real-to-complex transform: 4x4 complex outputs (the last dimension halved plus one). */
static void r2c_2d(void) {
    enum { R = 4, C = 6, CH = C / 2 + 1 };
    float x[R * C], y[2 * R * CH], xc[2 * R * C];
    double want[2 * R * C];
    for (int i = 0; i < R * C; i++) x[i] = cosf(0.3f * i * i), xc[2 * i] = x[i], xc[2 * i + 1] = 0;
    CUdeviceptr dx = upload(x, sizeof x), dy;
    CHECK(cuMemAlloc(&dy, sizeof y) == CUDA_SUCCESS);
    int n[2] = {R, C};
    cufftHandle p;
    OK(cufftPlanMany(&p, 2, n, NULL, 1, 0, NULL, 1, 0, R2C, 1));
    OK(cufftExecR2C(p, (void *)dx, (void *)dy));
    CHECK(cuMemcpyDtoH(y, dy, sizeof y) == CUDA_SUCCESS);
    dft(xc, want, n, 2, -1);
    for (int r = 0; r < R; r++) near(y + 2 * r * CH, want + 2 * r * C, 2 * CH, 1);
    OK(cufftDestroy(p));
}

/* torch's path: cufftCreate, cufftXtMakePlanMany with strided layouts, cufftXtExec on a stream. */
static void xt_plan(void) {
    enum { N = 5, B = 3 };
    float x[2 * N * B], y[2 * N * B];
    double want[2 * N];
    for (int i = 0; i < 2 * N * B; i++) x[i] = (float)((i * 7) % 11) - 5;
    CUdeviceptr dx = upload(x, sizeof x), dy;
    CHECK(cuMemAlloc(&dy, sizeof y) == CUDA_SUCCESS);
    CUstream s;
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
    cufftHandle p;
    OK(cufftCreate(&p));
    OK(cufftSetStream(p, s));
    long long n[1] = {N}, emb[1] = {N};
    size_t ws;
    OK(cufftXtMakePlanMany(p, 1, n, emb, 1, N, C_32F, emb, 1, N, C_32F, B, &ws, C_32F));
    OK(cufftXtExec(p, (void *)dx, (void *)dy, FORWARD));
    CHECK(cuStreamSynchronize(s) == CUDA_SUCCESS);
    CHECK(cuMemcpyDtoH(y, dy, sizeof y) == CUDA_SUCCESS);
    int dims[1] = {N};
    for (int b = 0; b < B; b++) {
        dft(x + 2 * N * b, want, dims, 1, -1);
        near(y + 2 * N * b, want, 2 * N, 1);
    }
    /* A plan's dimensions must be what its rank says: 3 of them, 1 sent, is refused. */
    long long none[3] = {0};
    CHECK(cufftXtMakePlanMany(p, 4, n, NULL, 1, N, C_32F, NULL, 1, N, C_32F, B, &ws, C_32F) != 0);
    CHECK(cufftXtMakePlanMany(p, 3, none, NULL, 1, N, C_32F, NULL, 1, N, C_32F, B, &ws, C_32F) != 0);
    OK(cufftDestroy(p));
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        cufftHandle p;
        CHECK(cufftCreate(&p) != 0);
        printf("fft_sim_test foreign: OK\n");
        return 0;
    }
    GC_TEST_CONTEXT();
    int v;
    OK(cufftGetVersion(&v));
    CHECK(v == 12000);
    c2c_1d();
    r2c_2d();
    xt_plan();
    CHECK(cufftSetStream(424242, NULL) == CUFFT_INVALID_PLAN); /* never this session's */
    CHECK(cufftXtSetCallback(0, NULL, 0, NULL) == CUFFT_NOT_SUPPORTED);
    CHECK(cufftXtSetCallback(0, NULL, 0, NULL) == CUFFT_NOT_SUPPORTED);
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS);
    printf("fft_sim_test: OK\n");
    return 0;
}

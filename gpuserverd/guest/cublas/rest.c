/* The rest of cuBLAS's API: every function NVIDIA's cublas_api.h declares that cublas.c does not
 * remote is exported here too, so a program (PyTorch imports 164 cuBLAS names, the wheel's
 * cuSOLVER more, the _64 forms among them) loads and runs the parts it uses; one it calls answers
 * CUBLAS_STATUS_NOT_SUPPORTED and says so once on stderr, naming the function. Declared without
 * their parameters (this file does not include cublas_v2.h): a caller's arguments are ignored,
 * which the x86-64 calling convention allows; each returns cublasStatus_t, an int.
 *
 * The few functions that return something else, or answer without the GPU, are here for real. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_INVALID_VALUE 7
#define CUBLAS_STATUS_NOT_SUPPORTED 15

#define NOT_REMOTED(name)                                                                              \
    EXPORT int name(void) {                                                                            \
        static atomic_int told;                                                                        \
        if (!atomic_exchange(&told, 1))                                                                \
            fprintf(stderr, "gpucloud libcublas: %s is not remoted (CUBLAS_STATUS_NOT_SUPPORTED)\n", #name); \
        return CUBLAS_STATUS_NOT_SUPPORTED;                                                            \
    }
#include "not_remoted.def"
/* Not in cublas_api.h, but the CUDA 13 wheel's libcusolver.so.12 imports it (cusolver-needs.txt). */
NOT_REMOTED(cublasSetEnvironmentMode)

/* The CUDA runtime version this cuBLAS API goes with (13.0): NVIDIA's reports the one it was
 * built against. */
EXPORT size_t cublasGetCudartVersion(void) { return 13000; }

/* cublasGetProperty(libraryPropertyType, int *): MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2. */
EXPORT int cublasGetProperty(int type, int *value) {
    static const int v[3] = {13, 0, 0};
    if (!value || type < 0 || type > 2) return CUBLAS_STATUS_INVALID_VALUE;
    *value = v[type];
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasXerbla is the error reporter of the legacy BLAS interface: NVIDIA's prints this line. */
EXPORT void cublasXerbla(const char *srName, int info) {
    fprintf(stderr, "** On entry to %s parameter number %d had an illegal value\n", srName ? srName : "?", info);
}

/* gpucloud's libcusparse.so.12: cuSPARSE remoted to gpuserverd through the generic library call
 * (SparseCall; backend/libcall.go). Handles and descriptors are the worker's ids. calls_gen.c has
 * every function of NVIDIA's cusparse.h that returns a status; this file keeps what a handle's
 * scalars need (its pointer mode) and what answers without the server. */
#include "internal.h"

/* Lets gpuserverd's cuda backend refuse this library if it were found in NVIDIA's place. */
EXPORT const int gpucloud_cusparse_guest = 1;

GC_LIBCALL_DEFINE("libcusparse", sparse, SPARSE, CUSPARSE_STATUS_NOT_INITIALIZED, CUSPARSE_STATUS_INTERNAL_ERROR)

int gcr_cusparseCreate(void *handle);
int gcr_cusparseDestroy(void *handle);
int gcr_cusparseSetStream(void *handle, void *stream);
int gcr_cusparseSetPointerMode(void *handle, int mode);
int gcr_cusparseCreateMatDescr(void *descr);
int gcr_cusparseDestroyMatDescr(void *descr);
int gcr_cusparseSetMatType(void *descr, int v);
int gcr_cusparseSetMatFillMode(void *descr, int v);
int gcr_cusparseSetMatDiagType(void *descr, int v);
int gcr_cusparseSetMatIndexBase(void *descr, int v);

/* ---- what the guest keeps of a handle (pointer mode, stream) or a matrix descriptor (its four
 * settings), by the worker's id ---- */

struct shadow {
    uintptr_t id;
    int v[4]; /* handle: pointer mode; matrix descriptor: type, fill mode, diagonal type, index base */
    void *stream;
    struct shadow *next;
};
static struct shadow *shadows;
static pthread_mutex_t shadows_mu = PTHREAD_MUTEX_INITIALIZER;

static void shadow_add(void *id) {
    struct shadow *s = calloc(1, sizeof *s);
    if (!s) return; /* a missing shadow reads as the defaults */
    s->id = (uintptr_t)id;
    pthread_mutex_lock(&shadows_mu);
    s->next = shadows;
    shadows = s;
    pthread_mutex_unlock(&shadows_mu);
}

static void shadow_drop(void *id) {
    pthread_mutex_lock(&shadows_mu);
    for (struct shadow **p = &shadows; *p; p = &(*p)->next) {
        if ((*p)->id == (uintptr_t)id) {
            struct shadow *s = *p;
            *p = s->next;
            free(s);
            break;
        }
    }
    pthread_mutex_unlock(&shadows_mu);
}

/* shadow_get copies id's shadow into *out; 0 when there is none (zero: the defaults). */
static int shadow_get(const void *id, struct shadow *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&shadows_mu);
    struct shadow *s = shadows;
    while (s && s->id != (uintptr_t)id) s = s->next;
    if (s) *out = *s;
    pthread_mutex_unlock(&shadows_mu);
    return s != NULL;
}

static void shadow_set(const void *id, int field, int value, void *stream, int set_stream) {
    pthread_mutex_lock(&shadows_mu);
    struct shadow *s = shadows;
    while (s && s->id != (uintptr_t)id) s = s->next;
    if (s && field >= 0) s->v[field] = value;
    if (s && set_stream) s->stream = stream;
    pthread_mutex_unlock(&shadows_mu);
}

EXPORT int cusparseCreate(void **handle) {
    int st = gcr_cusparseCreate(handle);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_add(*handle);
    return st;
}

EXPORT int cusparseDestroy(void *handle) {
    int st = gcr_cusparseDestroy(handle);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_drop(handle);
    return st;
}

EXPORT int cusparseSetStream(void *handle, void *stream) {
    int st = gcr_cusparseSetStream(handle, stream);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_set(handle, -1, 0, stream, 1);
    return st;
}

EXPORT int cusparseGetStream(void *handle, void **stream) {
    struct shadow s;
    if (!stream || !shadow_get(handle, &s)) return CUSPARSE_STATUS_INVALID_VALUE;
    *stream = s.stream;
    return CUSPARSE_STATUS_SUCCESS;
}

EXPORT int cusparseSetPointerMode(void *handle, int mode) {
    int st = gcr_cusparseSetPointerMode(handle, mode);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_set(handle, 0, mode, NULL, 0);
    return st;
}

EXPORT int cusparseGetPointerMode(void *handle, int *mode) {
    struct shadow s;
    if (!mode || !shadow_get(handle, &s)) return CUSPARSE_STATUS_INVALID_VALUE;
    *mode = s.v[0];
    return CUSPARSE_STATUS_SUCCESS;
}

/* scalarSize is the bytes of one scalar of cudaDataType t (0: unknown). */
static size_t scalar_size(int t) {
    switch (t) {
    case 0: return 4;  /* CUDA_R_32F */
    case 1: return 8;  /* CUDA_R_64F */
    case 2: return 2;  /* CUDA_R_16F */
    case 3: return 1;  /* CUDA_R_8I */
    case 4: return 8;  /* CUDA_C_32F */
    case 5: return 16; /* CUDA_C_64F */
    case 6: return 4;  /* CUDA_C_16F */
    case 10: return 4; /* CUDA_R_32I */
    case 14: return 2; /* CUDA_R_16BF */
    case 15: return 4; /* CUDA_C_16BF */
    }
    return 0;
}

int gc_sp_scalar(void *handle, const void *p, int computeType, struct gc_host *hb, uint64_t *w) {
    struct shadow s;
    shadow_get(handle, &s);
    if (s.v[0] == 1) { /* CUSPARSE_POINTER_MODE_DEVICE */
        *w = (uint64_t)(uintptr_t)p;
        return (*w & GC_SCALAR_HOST_BIT) ? -1 : 0;
    }
    return gc_host_scalar(hb, p, scalar_size(computeType), w);
}

/* ---- legacy matrix descriptors: their settings are read back here ---- */

EXPORT int cusparseCreateMatDescr(void **descr) {
    int st = gcr_cusparseCreateMatDescr(descr);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_add(*descr);
    return st;
}

EXPORT int cusparseDestroyMatDescr(void *descr) {
    int st = gcr_cusparseDestroyMatDescr(descr);
    if (st == CUSPARSE_STATUS_SUCCESS) shadow_drop(descr);
    return st;
}

#define MAT_FIELD(Name, field)                                                                             \
    EXPORT int cusparseSetMat##Name(void *descr, int v) {                                                  \
        int st = gcr_cusparseSetMat##Name(descr, v);                                                       \
        if (st == CUSPARSE_STATUS_SUCCESS) shadow_set(descr, field, v, NULL, 0);                           \
        return st;                                                                                         \
    }                                                                                                      \
    EXPORT int cusparseGetMat##Name(const void *descr) {                                                   \
        struct shadow s;                                                                                   \
        shadow_get(descr, &s);                                                                             \
        return s.v[field];                                                                                 \
    }
MAT_FIELD(Type, 0)
MAT_FIELD(FillMode, 1)
MAT_FIELD(DiagType, 2)
MAT_FIELD(IndexBase, 3)

/* ---- versions, errors, logging ---- */

EXPORT int cusparseGetProperty(int type, int *value) {
    static const int v[3] = {12, 6, 3};
    if (!value || type < 0 || type > 2) return CUSPARSE_STATUS_INVALID_VALUE;
    *value = v[type];
    return CUSPARSE_STATUS_SUCCESS;
}

static const char *const names[] = {"CUSPARSE_STATUS_SUCCESS", "CUSPARSE_STATUS_NOT_INITIALIZED",
    "CUSPARSE_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_INVALID_VALUE", "CUSPARSE_STATUS_ARCH_MISMATCH",
    "CUSPARSE_STATUS_MAPPING_ERROR", "CUSPARSE_STATUS_EXECUTION_FAILED", "CUSPARSE_STATUS_INTERNAL_ERROR",
    "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED", "CUSPARSE_STATUS_ZERO_PIVOT", "CUSPARSE_STATUS_NOT_SUPPORTED",
    "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES"};
static const char *const strings[] = {"success", "initialization error", "out of memory", "invalid value",
    "architecture mismatch", "mapping error", "execution failed", "internal error", "matrix type not supported",
    "zero pivot", "operation not supported (by gpucloud's libcusparse, or NVIDIA's)", "insufficient resources"};

EXPORT const char *cusparseGetErrorName(int status) {
    return status >= 0 && status < (int)(sizeof names / sizeof *names) ? names[status] : "CUSPARSE_STATUS_UNKNOWN";
}

EXPORT const char *cusparseGetErrorString(int status) {
    return status >= 0 && status < (int)(sizeof strings / sizeof *strings) ? strings[status] : "unknown error";
}

/* The library's own log is the server's; these settings of it have nothing to do in the guest. */
EXPORT int cusparseLoggerSetLevel(int level) { return level >= 0 && level <= 5 ? 0 : CUSPARSE_STATUS_INVALID_VALUE; }
EXPORT int cusparseLoggerSetMask(int mask) { return mask >= 0 ? 0 : CUSPARSE_STATUS_INVALID_VALUE; }
EXPORT int cusparseLoggerForceDisable(void) { return 0; }

/* Initialisation, the system queries and error strings. nvmlInit and nvmlShutdown are counted,
 * as NVIDIA's are: the connection closes with the last shutdown. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static struct gn_system sys;

int gn_initialized(void) {
    pthread_mutex_lock(&mu);
    int on = refs > 0;
    pthread_mutex_unlock(&mu);
    return on;
}

const struct gn_system *gn_sys(void) { return &sys; }

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH)) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&mu);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (refs == 0) {
        rc = gn_open(&sys);
        if (rc == NVML_SUCCESS) rc = gn_devices_load(sys.device_count);
        if (rc == NVML_SUCCESS && sys.device_count == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS))
            rc = NVML_ERROR_GPU_NOT_FOUND;
        if (rc != NVML_SUCCESS) gn_close();
    }
    if (rc == NVML_SUCCESS) refs++;
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
ALIAS(nvmlInit, nvmlInit_v2);

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    nvmlReturn_t rc = refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (refs > 0 && --refs == 0) gn_close();
    pthread_mutex_unlock(&mu);
    return rc;
}

/* The GPU server's NVIDIA driver ("simulated" on the simulated backend, a test double). */
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    return gn_copy_string(sys.driver_version, version, length);
}

/* NVIDIA's form: the CUDA major version, then the driver's ("13.580.95.05"). */
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    char v[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 16];
    snprintf(v, sizeof v, "%d.%s", sys.cuda_version / 1000, sys.driver_version);
    return gn_copy_string(v, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = sys.cuda_version;
    return NVML_SUCCESS;
}
ALIAS(nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetCudaDriverVersion);

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    default: return "Unknown Error";
    }
}

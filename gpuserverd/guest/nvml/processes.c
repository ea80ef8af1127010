/* The instance's own processes on a GPU, asked of gpuserverd each time (never another instance's:
 * the server lists only the caller's). Process names are the guest's own (/proc). */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* One process: its pid (0 where the server does not know the guest's) and memory. */
struct proc {
    unsigned pid;
    unsigned long long memory;
};

static nvmlReturn_t list(nvmlDevice_t device, struct proc *out, unsigned *n) {
    unsigned index;
    nvmlReturn_t rc = nvmlDeviceGetIndex(device, &index);
    if (rc != NVML_SUCCESS) return rc;
    struct gw_nvml_processes req = {.index = index};
    uint8_t buf[8];
    gw_nvml_processes_encode(&req, buf);
    struct gw_nvml_processes_reply r;
    rc = gn_request(GW_TYPE_NVML_PROCESSES, buf, gw_nvml_processes_size(&req), GW_TYPE_NVML_PROCESSES_REPLY, &r);
    if (rc != NVML_SUCCESS) return rc;
    if (r.memory_len != 8 * r.pids_count) return NVML_ERROR_UNKNOWN;
    const uint8_t *m = r.memory;
    for (uint32_t i = 0; i < r.pids_count; i++) {
        out[i].pid = gw_u32_at(r.pids, i);
        out[i].memory = (unsigned long long)gw_u32_at(m, 2 * i) | (unsigned long long)gw_u32_at(m, 2 * i + 1) << 32;
    }
    *n = r.pids_count;
    return NVML_SUCCESS;
}

/* processes answers the three versions of the call: v1 entries, or v2 (= v3) with MIG ids. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int v1) {
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    struct proc p[64];
    unsigned n = 0;
    nvmlReturn_t rc = list(device, p, &n);
    if (rc != NVML_SUCCESS) return rc;
    if (*infoCount < n || (n > 0 && !infos)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        if (v1) {
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){.pid = p[i].pid, .usedGpuMemory = p[i].memory};
        } else {
            ((nvmlProcessInfo_t *)infos)[i] = (nvmlProcessInfo_t){.pid = p[i].pid, .usedGpuMemory = p[i].memory,
                                                                   .gpuInstanceId = 0xFFFFFFFFu,
                                                                   .computeInstanceId = 0xFFFFFFFFu};
        }
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvmlProcessInfo_t *infos) {
    return processes(device, infoCount, infos, 0);
}
ALIAS(nvmlDeviceGetComputeRunningProcesses_v2, nvmlDeviceGetComputeRunningProcesses_v3);

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v1_t *infos) {
    return processes(device, infoCount, infos, 1);
}

/* No graphics and no MPS server run through gpucloud: none such processes, truthfully. */
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                            nvmlProcessInfo_t *infos) {
    unsigned index;
    nvmlReturn_t rc = nvmlDeviceGetIndex(device, &index);
    if (rc != NVML_SUCCESS) return rc;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    (void)infos;
    *infoCount = 0;
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlDeviceGetGraphicsRunningProcesses_v3);
ALIAS(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlDeviceGetGraphicsRunningProcesses_v3);
ALIAS(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlDeviceGetGraphicsRunningProcesses_v3);

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    char path[64], comm[256] = "";
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = pid ? fopen(path, "r") : NULL;
    if (!f) return NVML_ERROR_NOT_FOUND;
    size_t n = fread(comm, 1, sizeof comm - 1, f);
    fclose(f);
    comm[n] = 0; /* the program, up to its first argument's NUL */
    if (!comm[0]) return NVML_ERROR_NOT_FOUND;
    snprintf(name, length, "%s", comm);
    return NVML_SUCCESS;
}

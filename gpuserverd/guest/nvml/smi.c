/* gpucloud-smi: the instance's GPUs as nvidia-smi shows them, through NVML's public API (any
 * libnvidia-ml.so.1; in a VM, gpucloud's). NVIDIA's nvidia-smi does not run on gpucloud's NVML: it
 * needs the driver's private export table (docs/benchmarks/nvml-h100.md). Forms:
 *   gpucloud-smi                   a summary table and the processes
 *   gpucloud-smi -L                one line per GPU with its UUID
 *   gpucloud-smi --query-gpu=F,... --format=csv[,noheader][,nounits]
 * A reading the GPU or the tier does not give prints as [N/A]. */
#include "nvml_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ULL * 1024ULL)

struct gpu {
    nvmlDevice_t dev;
    unsigned index;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    int has_pci, has_util, has_temp, has_power, has_clocks, has_pstate;
    nvmlUtilization_t util;
    unsigned temp, power_mw, limit_mw, sm, max_sm;
    nvmlPstates_t pstate;
};

static void read_gpu(unsigned i, struct gpu *g) {
    memset(g, 0, sizeof *g);
    g->index = i;
    if (nvmlDeviceGetHandleByIndex_v2(i, &g->dev) != NVML_SUCCESS) return;
    nvmlDeviceGetName(g->dev, g->name, sizeof g->name);
    nvmlDeviceGetUUID(g->dev, g->uuid, sizeof g->uuid);
    nvmlDeviceGetMemoryInfo(g->dev, &g->mem);
    g->has_pci = nvmlDeviceGetPciInfo_v3(g->dev, &g->pci) == NVML_SUCCESS;
    g->has_util = nvmlDeviceGetUtilizationRates(g->dev, &g->util) == NVML_SUCCESS;
    g->has_temp = nvmlDeviceGetTemperature(g->dev, NVML_TEMPERATURE_GPU, &g->temp) == NVML_SUCCESS;
    g->has_power = nvmlDeviceGetPowerUsage(g->dev, &g->power_mw) == NVML_SUCCESS &&
                   nvmlDeviceGetEnforcedPowerLimit(g->dev, &g->limit_mw) == NVML_SUCCESS;
    g->has_clocks = nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_SM, &g->sm) == NVML_SUCCESS &&
                    nvmlDeviceGetMaxClockInfo(g->dev, NVML_CLOCK_SM, &g->max_sm) == NVML_SUCCESS;
    g->has_pstate = nvmlDeviceGetPerformanceState(g->dev, &g->pstate) == NVML_SUCCESS;
}

/* field prints one --query-gpu field of g, with unit unless nounits; 0 for an unknown field. */
static int field(const struct gpu *g, const char *f, int units, char *out, size_t cap) {
    const char *na = "[N/A]";
#define NUM(cond, fmt, unit, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) snprintf(out, cap, "%s", na);                                                 \
        else snprintf(out, cap, fmt "%s", __VA_ARGS__, units ? unit : "");                         \
    } while (0)
    if (!strcmp(f, "index")) snprintf(out, cap, "%u", g->index);
    else if (!strcmp(f, "name") || !strcmp(f, "gpu_name")) snprintf(out, cap, "%s", g->name);
    else if (!strcmp(f, "uuid") || !strcmp(f, "gpu_uuid")) snprintf(out, cap, "%s", g->uuid);
    else if (!strcmp(f, "pci.bus_id")) NUM(g->has_pci, "%s", "", g->pci.busId);
    else if (!strcmp(f, "memory.total")) NUM(1, "%llu", " MiB", g->mem.total / MiB);
    else if (!strcmp(f, "memory.used")) NUM(1, "%llu", " MiB", g->mem.used / MiB);
    else if (!strcmp(f, "memory.free")) NUM(1, "%llu", " MiB", g->mem.free / MiB);
    else if (!strcmp(f, "utilization.gpu")) NUM(g->has_util, "%u", " %", g->util.gpu);
    else if (!strcmp(f, "utilization.memory")) NUM(g->has_util, "%u", " %", g->util.memory);
    else if (!strcmp(f, "temperature.gpu")) NUM(g->has_temp, "%u", "", g->temp);
    else if (!strcmp(f, "power.draw")) NUM(g->has_power, "%.2f", " W", g->power_mw / 1000.0);
    else if (!strcmp(f, "power.limit")) NUM(g->has_power, "%.2f", " W", g->limit_mw / 1000.0);
    else if (!strcmp(f, "clocks.sm")) NUM(g->has_clocks, "%u", " MHz", g->sm);
    else if (!strcmp(f, "clocks.max.sm")) NUM(g->has_clocks, "%u", " MHz", g->max_sm);
    else if (!strcmp(f, "pstate")) NUM(g->has_pstate, "P%d", "", (int)g->pstate);
    else return 0;
#undef NUM
    return 1;
}

static int query(unsigned n, const char *fields, const char *format) {
    if (strncmp(format, "csv", 3) != 0) {
        fprintf(stderr, "gpucloud-smi: --format=%s: only csv[,noheader][,nounits]\n", format);
        return 2;
    }
    int header = !strstr(format, "noheader"), units = !strstr(format, "nounits");
    char list[1024];
    snprintf(list, sizeof list, "%s", fields);
    if (header) {
        char copy[1024], *save = NULL;
        snprintf(copy, sizeof copy, "%s", fields);
        int first = 1;
        for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save), first = 0) printf("%s%s", first ? "" : ", ", f);
        printf("\n");
    }
    for (unsigned i = 0; i < n; i++) {
        struct gpu g;
        read_gpu(i, &g);
        char copy[1024], *save = NULL, val[256];
        snprintf(copy, sizeof copy, "%s", list);
        int first = 1;
        for (char *f = strtok_r(copy, ",", &save); f; f = strtok_r(NULL, ",", &save), first = 0) {
            if (!field(&g, f, units, val, sizeof val)) {
                fprintf(stderr, "gpucloud-smi: field \"%s\" is not a valid field to query\n", f);
                return 2;
            }
            printf("%s%s", first ? "" : ", ", val);
        }
        printf("\n");
    }
    return 0;
}

static void table(unsigned n) {
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "?";
    int cuda = 0;
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    nvmlSystemGetCudaDriverVersion_v2(&cuda);
    printf("gpucloud-smi   GPU server driver: %s   CUDA: %d.%d\n", driver, cuda / 1000, cuda % 1000 / 10);
    printf("GPU  Name                            Bus-Id            Temp  Perf  Pwr:Usage/Cap   Memory-Usage          GPU-Util\n");
    for (unsigned i = 0; i < n; i++) {
        struct gpu g;
        char temp[16] = "N/A", perf[8] = "N/A", pwr[32] = "N/A", util[16] = "N/A";
        read_gpu(i, &g);
        if (g.has_temp) snprintf(temp, sizeof temp, "%uC", g.temp);
        if (g.has_pstate) snprintf(perf, sizeof perf, "P%d", (int)g.pstate);
        if (g.has_power) snprintf(pwr, sizeof pwr, "%uW / %uW", g.power_mw / 1000, g.limit_mw / 1000);
        if (g.has_util) snprintf(util, sizeof util, "%u%%", g.util.gpu);
        printf("%3u  %-30.30s  %-16s  %-4s  %-4s  %-14s  %6lluMiB / %6lluMiB  %s\n", i, g.name,
               g.has_pci ? g.pci.busId : "N/A", temp, perf, pwr, g.mem.used / MiB, g.mem.total / MiB, util);
    }
    printf("\nProcesses (this instance's):\n  GPU      PID  Process name                      GPU Memory\n");
    int any = 0;
    for (unsigned i = 0; i < n; i++) {
        struct gpu g;
        read_gpu(i, &g);
        nvmlProcessInfo_t p[64];
        unsigned count = 64;
        if (nvmlDeviceGetComputeRunningProcesses_v3(g.dev, &count, p) != NVML_SUCCESS) continue;
        for (unsigned k = 0; k < count; k++, any = 1) {
            char name[64] = "(a CUDA session)";
            if (p[k].pid) nvmlSystemGetProcessName(p[k].pid, name, sizeof name);
            printf("  %3u  %7u  %-32.32s  %6lluMiB\n", i, p[k].pid, name, p[k].usedGpuMemory / MiB);
        }
    }
    if (!any) printf("  No running processes found\n");
}

int main(int argc, char **argv) {
    const char *fields = NULL, *format = "csv";
    int list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-L") || !strcmp(argv[i], "--list-gpus")) list = 1;
        else if (!strncmp(argv[i], "--query-gpu=", 12)) fields = argv[i] + 12;
        else if (!strncmp(argv[i], "--format=", 9)) format = argv[i] + 9;
        else {
            fprintf(stderr, "usage: gpucloud-smi [-L | --query-gpu=FIELD,... --format=csv[,noheader][,nounits]]\n");
            return 2;
        }
    }
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "gpucloud-smi: NVML: %s\n", nvmlErrorString(rc));
        return rc == NVML_ERROR_DRIVER_NOT_LOADED ? 9 : 1;
    }
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    int status = 0;
    if (list) {
        for (unsigned i = 0; i < n; i++) {
            struct gpu g;
            read_gpu(i, &g);
            printf("GPU %u: %s (UUID: %s)\n", i, g.name, g.uuid);
        }
    } else if (fields) {
        status = query(n, fields, format);
    } else {
        table(n);
    }
    nvmlShutdown();
    return status;
}

/* Internals of gpucloud's libnvidia-ml.so.1: the monitoring connection to gpuserverd (client.c)
 * and the GPUs it reports, cached briefly (device.c). */
#ifndef GPUCLOUD_NVML_INTERNAL_H
#define GPUCLOUD_NVML_INTERNAL_H

#include "nvml_api.h"
#include "../wire_gen.h"
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))
#define ALIAS(name, target) EXPORT __typeof__(target) name __attribute__((alias(#target)))

#define GN_MAX_DEVICES 16

/* What the monitoring connection's hello told. */
struct gn_system {
    char tier[33];
    char driver_version[81];
    int cuda_version;
    int simulated;
    unsigned device_count;
};

/* One GPU as the instance sees it (NvmlDeviceReply, its strings copied). */
struct gn_device {
    char name[97];
    char uuid[81];
    char pci_bus_id[33];
    unsigned pci_device_id;
    int major, minor;
    unsigned long long memory_total, memory_used;
    unsigned supported; /* GW_NVML_* bits */
    unsigned util_gpu, util_memory;
    unsigned clocks[8]; /* MHz: graphics, sm, memory, video, then their maxima */
    unsigned temperature, power_mw, power_limit_mw, fan_percent, pstate;
};

struct nvmlDevice_st {
    unsigned index;
};

/* client.c: opens the connection (nvmlInit), closes it (the last nvmlShutdown). */
nvmlReturn_t gn_open(struct gn_system *sys);
void gn_close(void);
/* Sends an encoded request and decodes the reply of type want into reply; the reply's strings
 * and bytes point into a buffer the next request reuses. Reconnects once if gpuserverd went. */
nvmlReturn_t gn_request(uint16_t type, const uint8_t *body, size_t n, uint16_t want, void *reply);

/* device.c */
nvmlReturn_t gn_devices_load(unsigned count);
/* Copies the current state of the device behind handle into *d (refreshed when stale). */
nvmlReturn_t gn_device(nvmlDevice_t handle, struct gn_device *d);
int gn_initialized(void);
const struct gn_system *gn_sys(void);
/* The handle for the index, or NULL. */
nvmlDevice_t gn_handle(unsigned index);
/* Copies s into out of length bytes: NVML_ERROR_INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t gn_copy_string(const char *s, char *out, unsigned length);

#endif

/* The GPUs of the instance: fetched from gpuserverd at nvmlInit and again when a reading is older
 * than FRESH_NS, so that nvidia-smi's dozens of queries per GPU cost one round trip. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define FRESH_NS 200000000LL

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlDevice_st handles[GN_MAX_DEVICES];
static struct gn_device devices[GN_MAX_DEVICES];
static long long fetched_ns[GN_MAX_DEVICES];
static unsigned count;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* fetch asks gpuserverd for one GPU into devices[i]; mu held. */
static nvmlReturn_t fetch(unsigned i) {
    struct gw_nvml_device req = {.index = i};
    uint8_t buf[8];
    gw_nvml_device_encode(&req, buf);
    struct gw_nvml_device_reply r;
    nvmlReturn_t rc = gn_request(GW_TYPE_NVML_DEVICE, buf, gw_nvml_device_size(&req), GW_TYPE_NVML_DEVICE_REPLY, &r);
    if (rc != NVML_SUCCESS) return rc;
    struct gn_device *d = &devices[i];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%.*s", (int)r.name_len, r.name);
    snprintf(d->uuid, sizeof d->uuid, "%.*s", (int)r.uuid_len, r.uuid);
    snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "%.*s", (int)r.pci_bus_id_len, r.pci_bus_id);
    d->pci_device_id = r.pci_device_id;
    d->major = r.major;
    d->minor = r.minor;
    d->memory_total = r.memory_total;
    d->memory_used = r.memory_used;
    d->supported = r.supported;
    d->util_gpu = r.util_gpu;
    d->util_memory = r.util_memory;
    for (uint32_t k = 0; k < r.clocks_count && k < 8; k++) d->clocks[k] = gw_u32_at(r.clocks, k);
    if (r.clocks_count < 8) d->supported &= ~(unsigned)GW_NVML_CLOCKS;
    d->temperature = r.temperature;
    d->power_mw = r.power_mw;
    d->power_limit_mw = r.power_limit_mw;
    d->fan_percent = r.fan_percent;
    d->pstate = r.pstate;
    fetched_ns[i] = now_ns();
    return NVML_SUCCESS;
}

nvmlReturn_t gn_devices_load(unsigned n) {
    pthread_mutex_lock(&mu);
    nvmlReturn_t rc = NVML_SUCCESS;
    count = 0;
    for (unsigned i = 0; i < n && rc == NVML_SUCCESS; i++) {
        handles[i].index = i;
        rc = fetch(i);
        if (rc == NVML_SUCCESS) count = i + 1;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* index_of is the handle's index, or -1 for a pointer that is no handle of ours. */
static int index_of(nvmlDevice_t h) {
    if (!gn_initialized()) return -1;
    for (unsigned i = 0; i < count; i++)
        if (h == &handles[i]) return (int)i;
    return -1;
}

nvmlDevice_t gn_handle(unsigned index) { return index < count ? &handles[index] : NULL; }

nvmlReturn_t gn_device(nvmlDevice_t h, struct gn_device *d) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    int i = index_of(h);
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&mu);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (now_ns() - fetched_ns[i] > FRESH_NS) rc = fetch((unsigned)i);
    if (rc == NVML_SUCCESS) *d = devices[i];
    pthread_mutex_unlock(&mu);
    return rc;
}

nvmlReturn_t gn_copy_string(const char *s, char *out, unsigned length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* Declares the device d for the call's handle, or returns the reason there is none. */
#define DEVICE(h)                                                                                  \
    struct gn_device d;                                                                            \
    {                                                                                              \
        nvmlReturn_t rc_ = gn_device((h), &d);                                                     \
        if (rc_ != NVML_SUCCESS) return rc_;                                                       \
    }
/* Fails with NVML_ERROR_NOT_SUPPORTED unless gpuserverd sent the reading (the tier allows it). */
#define READING(bit)                                                                               \
    if (!(d.supported & (bit))) return NVML_ERROR_NOT_SUPPORTED

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = count;
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetCount, nvmlDeviceGetCount_v2);

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2);

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    pthread_mutex_lock(&mu); /* a refresh rewrites devices[] */
    for (unsigned i = 0; i < count && rc != NVML_SUCCESS; i++) {
        if (strcasecmp(devices[i].uuid, uuid) == 0) {
            *device = &handles[i];
            rc = NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* parse_bus_id reads "domain:bus:device.function" (hex, any domain width). */
static int parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *dev) {
    unsigned fn;
    return sscanf(s, "%x:%x:%x.%x", domain, bus, dev, &fn) == 4 ? 0 : -1;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    unsigned dom, bus, dv, dom2, bus2, dv2;
    if (!pciBusId || !device || parse_bus_id(pciBusId, &dom, &bus, &dv) != 0) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    pthread_mutex_lock(&mu);
    for (unsigned i = 0; i < count && rc != NVML_SUCCESS; i++) {
        if (parse_bus_id(devices[i].pci_bus_id, &dom2, &bus2, &dv2) == 0 && dom == dom2 && bus == bus2 && dv == dv2) {
            *device = &handles[i];
            rc = NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
ALIAS(nvmlDeviceGetHandleByPciBusId, nvmlDeviceGetHandleByPciBusId_v2);

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    if (!gn_initialized()) return NVML_ERROR_UNINITIALIZED;
    int i = index_of(device);
    if (i < 0 || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)i;
    return NVML_SUCCESS;
}

/* The VM has no /dev/nvidiaN; the instance's ordinal stands for it. */
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    return nvmlDeviceGetIndex(device, minorNumber);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(device);
    return gn_copy_string(d.name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(device);
    return gn_copy_string(d.uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
    DEVICE(device);
    if (!type) return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d.major;
    *minor = d.minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    if (parse_bus_id(d.pci_bus_id, &pci->domain, &pci->bus, &pci->device) != 0) return NVML_ERROR_NOT_SUPPORTED;
    pci->pciDeviceId = d.pci_device_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain & 0xffff, pci->bus & 0xff,
             pci->device & 0xff);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", pci->domain, pci->bus & 0xff, pci->device & 0xff);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = d.memory_total;
    memory->used = d.memory_used < d.memory_total ? d.memory_used : d.memory_total;
    memory->free = d.memory_total - memory->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    if (memory && memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlMemory_t m;
    nvmlReturn_t rc = nvmlDeviceGetMemoryInfo(device, memory ? &m : NULL);
    if (rc != NVML_SUCCESS) return rc;
    memory->total = m.total;
    memory->reserved = 0;
    memory->free = m.free;
    memory->used = m.used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE(device);
    READING(GW_NVML_UTIL);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = d.util_gpu;
    utilization->memory = d.util_memory;
    return NVML_SUCCESS;
}

/* clock answers one of the clocks: current (base 0) or maximum (base 4). */
static nvmlReturn_t clock_mhz(nvmlDevice_t device, nvmlClockType_t type, unsigned base, unsigned int *mhz) {
    DEVICE(device);
    READING(GW_NVML_CLOCKS);
    if (!mhz || (unsigned)type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = d.clocks[base + (unsigned)type];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock_) {
    return clock_mhz(device, type, 0, clock_);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock_) {
    return clock_mhz(device, type, 4, clock_);
}

EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                       unsigned int *clockMHz) {
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT:
        return clock_mhz(device, clockType, 0, clockMHz);
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        return clock_mhz(device, clockType, 4, clockMHz);
    default:
        return NVML_ERROR_NOT_SUPPORTED; /* application clocks are the GPU server's to set */
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp) {
    DEVICE(device);
    READING(GW_NVML_TEMPERATURE);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d.temperature;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE(device);
    READING(GW_NVML_POWER);
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = d.power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE(device);
    READING(GW_NVML_POWER);
    if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
    *limit = d.power_limit_mw;
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetPowerManagementLimit, nvmlDeviceGetEnforcedPowerLimit);

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {
    DEVICE(device);
    READING(GW_NVML_FAN);
    if (!speed) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = d.fan_percent;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState) {
    DEVICE(device);
    READING(GW_NVML_PSTATE);
    if (!pState) return NVML_ERROR_INVALID_ARGUMENT;
    *pState = (nvmlPstates_t)d.pstate;
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetPowerState, nvmlDeviceGetPerformanceState);

/* Sessions of several processes share a GPU through gpuserverd, as in the default compute mode. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    DEVICE(device);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

/* gpucloud hands out whole GPUs or slices of its own, never MIG instances. */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    DEVICE(device);
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* No display is ever attached through gpucloud. */
EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display) {
    DEVICE(device);
    if (!display) return NVML_ERROR_INVALID_ARGUMENT;
    *display = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
ALIAS(nvmlDeviceGetDisplayActive, nvmlDeviceGetDisplayMode);

/* The driver's persistence and the ECC setting are the GPU server's, not the VM's to see. */
EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEVICE(device);
    (void)mode;
    return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    DEVICE(device);
    (void)current, (void)pending;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* gpucloud's libnvidia-ml.so.1 against a real gpuserverd on the simulated backend (guesttest,
 * nvml_test.go). Linked with -lnvidia-ml only; the modes that need a CUDA session load the guest
 * libcuda with dlopen, as a program using both would.
 *
 *   nvml_sim_test shared QUOTA_MIB  a shared-tier instance: its slice, its own use, no readings
 *   nvml_sim_test dedicated MIB     a dedicated GPU of MIB: the (simulated) readings
 *   nvml_sim_test hold MIB          holds MIB of GPU memory through libcuda until stdin closes
 *   nvml_sim_test unreachable       no gpuserverd: nvmlInit fails cleanly */
#include "nvml_api.h"
#include "../include/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPECT_RC(call, want)                                                                      \
    do {                                                                                           \
        nvmlReturn_t r_ = (call);                                                                  \
        if (r_ != (want)) {                                                                        \
            fprintf(stderr, "%s:%d: %s = %d (%s), want %s\n", __FILE__, __LINE__, #call, r_,       \
                    nvmlErrorString(r_), #want);                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK(call) EXPECT_RC(call, NVML_SUCCESS)
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define MiB (1ULL << 20)

/* A CUDA session through the guest libcuda: allocates mib MiB on device 0 and returns its UUID
 * in NVML's text form. */
static void cuda_session(unsigned long long mib, char uuid[NVML_DEVICE_UUID_BUFFER_SIZE]) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(lib != NULL);
    __typeof__(cuInit) *init = (__typeof__(cuInit) *)dlsym(lib, "cuInit");
    __typeof__(cuDeviceGetUuid_v2) *get_uuid = (__typeof__(cuDeviceGetUuid_v2) *)dlsym(lib, "cuDeviceGetUuid_v2");
    __typeof__(cuDevicePrimaryCtxRetain) *retain = (__typeof__(cuDevicePrimaryCtxRetain) *)dlsym(lib, "cuDevicePrimaryCtxRetain");
    __typeof__(cuCtxSetCurrent) *set_current = (__typeof__(cuCtxSetCurrent) *)dlsym(lib, "cuCtxSetCurrent");
    __typeof__(cuMemAlloc_v2) *alloc = (__typeof__(cuMemAlloc_v2) *)dlsym(lib, "cuMemAlloc_v2");
    EXPECT(init && get_uuid && retain && set_current && alloc);
    CUuuid u;
    CUcontext ctx;
    CUdeviceptr p;
    EXPECT(init(0) == CUDA_SUCCESS);
    EXPECT(get_uuid(&u, 0) == CUDA_SUCCESS);
    EXPECT(retain(&ctx, 0) == CUDA_SUCCESS && set_current(ctx) == CUDA_SUCCESS);
    if (mib) EXPECT(alloc(&p, mib * MiB) == CUDA_SUCCESS);
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(uuid, NVML_DEVICE_UUID_BUFFER_SIZE,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* wait_processes polls (the server learns a session's memory once a second) until the GPU shows
 * n processes holding mib MiB in all, then checks memory used shows the same. */
static void wait_processes(nvmlDevice_t dev, unsigned n, unsigned long long mib) {
    nvmlProcessInfo_t p[8];
    unsigned count = 0;
    unsigned long long held = 0;
    for (int tries = 0; tries < 100; tries++) {
        count = 8;
        CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, p));
        held = 0;
        for (unsigned i = 0; i < count; i++) held += p[i].usedGpuMemory;
        if (count == n && held == mib * MiB) break;
        usleep(100000);
    }
    if (count != n || held != mib * MiB) {
        fprintf(stderr, "processes: %u holding %llu bytes, want %u holding %llu MiB\n", count, held, n, mib);
        exit(1);
    }
    for (unsigned i = 0; i < count; i++) EXPECT(p[i].gpuInstanceId == 0xFFFFFFFFu);
    /* The processes are this one: its libcuda told the server its pid. */
    for (unsigned i = 0; i < count; i++) {
        char name[256];
        if (p[i].pid != (unsigned)getpid()) {
            fprintf(stderr, "process %u has pid %u, want this process's %d\n", i, p[i].pid, (int)getpid());
            exit(1);
        }
        CHECK(nvmlSystemGetProcessName(p[i].pid, name, sizeof name));
        EXPECT(strstr(name, "nvml_sim_test") != NULL);
    }
    usleep(250000); /* past the library's cache of the device's reading */
    nvmlMemory_t m;
    CHECK(nvmlDeviceGetMemoryInfo(dev, &m));
    if (m.used != mib * MiB || m.free != m.total - m.used) {
        fprintf(stderr, "memory: used %llu free %llu of %llu, want %llu MiB used\n", m.used, m.free, m.total, mib);
        exit(1);
    }
}

static void identity(nvmlDevice_t dev, unsigned long long total_mib) {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], small[4];
    CHECK(nvmlDeviceGetName(dev, name, sizeof name));
    EXPECT(strcmp(name, "Simulated GPU (test double)") == 0);
    EXPECT_RC(nvmlDeviceGetName(dev, small, sizeof small), NVML_ERROR_INSUFFICIENT_SIZE);
    nvmlMemory_t m;
    CHECK(nvmlDeviceGetMemoryInfo(dev, &m));
    if (m.total != total_mib * MiB) {
        fprintf(stderr, "memory total %llu, want %llu MiB\n", m.total, total_mib);
        exit(1);
    }
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    CHECK(nvmlDeviceGetMemoryInfo_v2(dev, &m2));
    EXPECT(m2.total == m.total);
    m2.version = 1;
    EXPECT_RC(nvmlDeviceGetMemoryInfo_v2(dev, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    int major, minor;
    CHECK(nvmlDeviceGetCudaComputeCapability(dev, &major, &minor));
    EXPECT(major == 9 && minor == 0);
    nvmlPciInfo_t pci;
    CHECK(nvmlDeviceGetPciInfo_v3(dev, &pci));
    EXPECT(strcmp(pci.busId, "00000000:10:00.0") == 0 && strcmp(pci.busIdLegacy, "0000:10:00.0") == 0 && pci.bus == 0x10);
    nvmlDevice_t again;
    CHECK(nvmlDeviceGetHandleByPciBusId_v2("0000:10:00.0", &again));
    EXPECT(again == dev);
    EXPECT_RC(nvmlDeviceGetHandleByPciBusId_v2("0000:11:00.0", &again), NVML_ERROR_NOT_FOUND);
    unsigned index;
    CHECK(nvmlDeviceGetIndex(dev, &index));
    EXPECT(index == 0);
    unsigned mig, pending;
    CHECK(nvmlDeviceGetMigMode(dev, &mig, &pending));
    EXPECT(mig == NVML_DEVICE_MIG_DISABLE);
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    CHECK(nvmlSystemGetDriverVersion(driver, sizeof driver));
    EXPECT(strcmp(driver, "simulated") == 0);
    int cuda;
    CHECK(nvmlSystemGetCudaDriverVersion_v2(&cuda));
    EXPECT(cuda == 12040);
}

/* unsupported calls a function the library only names: it answers NOT_SUPPORTED, not a crash. */
static void unsupported(const char *name) {
    int (*f)(void *, void *) = (int (*)(void *, void *))dlsym(RTLD_DEFAULT, name);
    EXPECT(f != NULL);
    unsigned long long scratch[8] = {0};
    EXPECT(f(scratch, scratch) == NVML_ERROR_NOT_SUPPORTED);
}

static nvmlDevice_t init_one(void) {
    unsigned n = 99;
    EXPECT_RC(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    CHECK(nvmlInit_v2());
    CHECK(nvmlDeviceGetCount_v2(&n));
    EXPECT(n == 1);
    nvmlDevice_t dev;
    EXPECT_RC(nvmlDeviceGetHandleByIndex_v2(1, &dev), NVML_ERROR_INVALID_ARGUMENT);
    CHECK(nvmlDeviceGetHandleByIndex_v2(0, &dev));
    return dev;
}

static void shared(unsigned long long quota_mib) {
    char cuda_uuid[NVML_DEVICE_UUID_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    cuda_session(8, cuda_uuid);
    nvmlDevice_t dev = init_one();
    CHECK(nvmlDeviceGetUUID(dev, uuid, sizeof uuid));
    if (strcmp(uuid, cuda_uuid) != 0) {
        fprintf(stderr, "NVML's UUID %s, CUDA's %s\n", uuid, cuda_uuid);
        exit(1);
    }
    nvmlDevice_t by_uuid;
    CHECK(nvmlDeviceGetHandleByUUID(cuda_uuid, &by_uuid));
    EXPECT(by_uuid == dev);
    identity(dev, quota_mib);
    wait_processes(dev, 1, 8);
    /* The whole GPU's readings would show other tenants' work. */
    nvmlUtilization_t u;
    unsigned v;
    nvmlPstates_t ps;
    EXPECT_RC(nvmlDeviceGetUtilizationRates(dev, &u), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_RC(nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &v), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_RC(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &v), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_RC(nvmlDeviceGetPowerUsage(dev, &v), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_RC(nvmlDeviceGetPerformanceState(dev, &ps), NVML_ERROR_NOT_SUPPORTED);
    unsupported("nvmlDeviceGetBAR1MemoryInfo");
    unsupported("nvmlDeviceGetTotalEccErrors");
    CHECK(nvmlShutdown());
    EXPECT_RC(nvmlDeviceGetName(dev, uuid, sizeof uuid), NVML_ERROR_UNINITIALIZED);
    EXPECT_RC(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

/* hammer asks from one of several threads at once: every answer whole, none crossed with another
 * thread's (one connection, one request at a time, a cache rewritten under its lock). */
static void *hammer(void *arg) {
    nvmlDevice_t dev = arg, found;
    for (int i = 0; i < 200; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        unsigned temp, count = 0;
        CHECK(nvmlDeviceGetName(dev, name, sizeof name));
        CHECK(nvmlDeviceGetUUID(dev, uuid, sizeof uuid));
        CHECK(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp));
        CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL));
        CHECK(nvmlDeviceGetHandleByUUID(uuid, &found));
        EXPECT(strcmp(name, "Simulated GPU (test double)") == 0 && temp == 35 && found == dev);
        if (i % 50 == 0) usleep(210000); /* let the cache go stale: refreshes race the readers */
    }
    return NULL;
}

static void dedicated(unsigned long long total_mib) {
    nvmlDevice_t dev = init_one();
    CHECK(nvmlInit_v2()); /* counted: one shutdown leaves it open */
    identity(dev, total_mib);
    nvmlUtilization_t u;
    CHECK(nvmlDeviceGetUtilizationRates(dev, &u));
    EXPECT(u.gpu <= 100 && u.memory <= 100);
    unsigned v;
    CHECK(nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &v));
    EXPECT(v == 1410);
    CHECK(nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_GRAPHICS, &v));
    EXPECT(v == 1980);
    CHECK(nvmlDeviceGetClock(dev, NVML_CLOCK_MEM, NVML_CLOCK_ID_CUSTOMER_BOOST_MAX, &v));
    EXPECT(v == 2619);
    CHECK(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &v));
    EXPECT(v == 35);
    CHECK(nvmlDeviceGetPowerUsage(dev, &v));
    EXPECT(v == 70000);
    CHECK(nvmlDeviceGetEnforcedPowerLimit(dev, &v));
    EXPECT(v == 700000);
    EXPECT_RC(nvmlDeviceGetFanSpeed(dev, &v), NVML_ERROR_NOT_SUPPORTED); /* none on a data-centre GPU */
    nvmlPstates_t ps;
    CHECK(nvmlDeviceGetPerformanceState(dev, &ps));
    EXPECT(ps == NVML_PSTATE_0);
    unsigned count = 0;
    CHECK(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL));
    EXPECT(count == 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) EXPECT(pthread_create(&th[i], NULL, hammer, dev) == 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK(nvmlShutdown());
    CHECK(nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &v));
    CHECK(nvmlShutdown());
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned long long mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    if (strcmp(mode, "shared") == 0) {
        shared(mib);
    } else if (strcmp(mode, "dedicated") == 0) {
        dedicated(mib);
    } else if (strcmp(mode, "hold") == 0) {
        char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
        cuda_session(mib, uuid);
        printf("holding\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {
        }
    } else if (strcmp(mode, "unreachable") == 0) {
        EXPECT_RC(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
        EXPECT(strcmp(nvmlErrorString(NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded") == 0);
        unsigned n;
        EXPECT_RC(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    } else {
        fprintf(stderr, "usage: nvml_sim_test shared QUOTA_MIB | dedicated MIB | hold MIB | unreachable\n");
        return 2;
    }
    printf("nvml_sim_test %s: OK\n", mode);
    return 0;
}

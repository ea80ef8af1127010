// Runtime API: device and version queries, checked for consistency with each other.
#include "rt_common.h"
#include <cstring>

int main() {
    int count = 0, drv = 0, rt = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count >= 1, "device count %d", count);
    CHECK(cudaDriverGetVersion(&drv));
    CHECK(cudaRuntimeGetVersion(&rt));
    EXPECT(drv >= 12000 && rt >= 12000, "driver %d runtime %d", drv, rt);
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        CHECK(cudaGetDeviceProperties(&p, d));
        int major = 0, minor = 0, sms = 0, warp = 0;
        CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
        CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
        CHECK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, d));
        EXPECT(p.major == major && p.minor == minor, "properties %d.%d, attributes %d.%d", p.major, p.minor, major, minor);
        EXPECT(p.multiProcessorCount == sms && sms > 0, "SMs %d vs %d", p.multiProcessorCount, sms);
        EXPECT(warp == 32 && p.warpSize == 32, "warp size %d", warp);
        EXPECT(std::strlen(p.name) > 0, "empty device name");
        CHECK(cudaSetDevice(d));
        size_t freeb = 0, total = 0;
        CHECK(cudaMemGetInfo(&freeb, &total));
        EXPECT(total > 0 && freeb <= total && total <= p.totalGlobalMem + (1u << 20), "memory %zu free of %zu (props %zu)", freeb, total, p.totalGlobalMem);
        char bus[32];
        CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
        std::printf("device %d: %s, sm_%d%d, %d SMs, %zu MiB, %s\n", d, p.name, major, minor, sms, total >> 20, bus);
    }
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == count - 1, "current device %d after cudaSetDevice(%d)", cur, count - 1);
    std::printf("rt_query: OK (driver %d, runtime %d)\n", drv, rt);
    return 0;
}

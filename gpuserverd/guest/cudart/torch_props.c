/* cudaDeviceProp's fields beyond cudart.c's core ones, which PyTorch (torch.cuda.get_device_properties,
 * its kernels' launch heuristics) and libraries reading the whole struct see. Each is the driver's
 * attribute of the same meaning; one the driver does not answer (the guest library knows fewer
 * attributes than NVIDIA's driver) stays 0, as on a device without the feature, rather than failing
 * the whole query. */
#include "internal.h"

void more_properties(struct cudaDeviceProp *p, CUdevice dev) {
    int v;
#define OPT(field, attr) \
    if (cuDeviceGetAttribute(&v, (CUdevice_attribute)(attr), dev) == CUDA_SUCCESS) p->field = v
    OPT(memPitch, 11);
    OPT(textureAlignment, 14);
    OPT(integrated, 18);
    OPT(canMapHostMemory, 19);
    OPT(ECCEnabled, 32);
    OPT(tccDriver, 35);
    OPT(memoryBusWidth, 37);
    OPT(texturePitchAlignment, 51);
    OPT(streamPrioritiesSupported, 78);
    OPT(globalL1CacheSupported, 79);
    OPT(localL1CacheSupported, 80);
    OPT(isMultiGpuBoard, 84);
    OPT(multiGpuBoardGroupID, 85);
    OPT(hostNativeAtomicSupported, 86);
    OPT(pageableMemoryAccess, 88);
    OPT(concurrentManagedAccess, 89);
    OPT(computePreemptionSupported, 90);
    OPT(canUseHostPointerForRegisteredMem, 91);
    OPT(cooperativeLaunch, 95);
    OPT(hostRegisterSupported, 99);
    OPT(persistingL2CacheMaxSize, 108);
    OPT(accessPolicyMaxWindowSize, 109);
    OPT(memoryPoolsSupported, 115);
    OPT(clusterLaunch, 120);
#undef OPT
    /* Interprocess events are shared between the processes of one instance (ipc.c). */
    p->ipcEventSupported = 1;
}

/* libnppc.so.13's one function: NPP's version, answered here (the release of NPP whose headers
 * apigen read: npp.h of CUDA 13.0, NPP_VER_MAJOR.MINOR and NPP_VER_BUILD). */
#include "internal.h"

typedef struct {
    int major, minor, build;
} NppLibraryVersion;

EXPORT const NppLibraryVersion *nppGetLibVersion(void) {
    static const NppLibraryVersion v = {13, 0, 2};
    return &v;
}

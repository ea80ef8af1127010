/* A decoy libcudart.so.13 (soname and all) standing for NVIDIA's in a wheel's nvidia/cu13/lib:
 * it says "decoy" when loaded and answers a runtime version no runtime has. */
#include <stdio.h>

__attribute__((constructor)) static void loaded(void) { fprintf(stderr, "decoy\n"); }

int cudaRuntimeGetVersion(int *v) {
    *v = -1;
    return 0;
}

/* rpath_probe: linked with DT_RPATH (not RUNPATH) to a folder holding a decoy libcudart.so.13, as
 * torch's libraries are to the wheel's nvidia/cu13/lib. It prints which libcudart.so.13 answered
 * and the version it answered, the way the test reads it:
 *   rpath_probe            through its own DT_NEEDED entry
 *   rpath_probe EXT.so     through a library it dlopens (whose own DT_RPATH names the decoy)
 *   rpath_probe PATH.so 1  by dlopen of that path, as torch's __init__ preloads the wheel's libraries
 *   rpath_probe wait       prints, then waits for stdin to close (for gpucloud-info PID)
 * With PROBE_DEVICES=1 it also asks the runtime it got for the number of devices, when that
 * runtime has cudaGetDeviceCount (gpucloud's does; the decoy does not). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cudaRuntimeGetVersion(int *);

static void report(const char *how, void *fn, int v) {
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fname) {
        printf("%s: version %d from an unknown object\n", how, v);
        return;
    }
    printf("%s: version %d from %s\n", how, v, info.dli_fname);
}

int main(int argc, char **argv) {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    report("needed", (void *)cudaRuntimeGetVersion, v);
    const char *probe = getenv("PROBE_DEVICES");
    int (*count)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cudaGetDeviceCount");
    if (probe && strcmp(probe, "1") == 0 && count) {
        int n = -1, rc = count(&n);
        printf("devices: %d (rc %d)\n", n, rc);
    }
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {
        }
        return 0;
    }
    if (argc > 1) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            printf("dlopen %s: %s\n", argv[1], dlerror());
            return 1;
        }
        if (argc > 2) { /* the library itself */
            int (*f)(int *) = (int (*)(int *))dlsym(h, "cudaRuntimeGetVersion");
            if (!f) return printf("no cudaRuntimeGetVersion in %s\n", argv[1]), 1;
            f(&v);
            report("dlopen-path", (void *)f, v);
        } else {
            int (*f)(void) = (int (*)(void))dlsym(h, "ext_runtime_version");
            void *rt = dlsym(h, "cudaRuntimeGetVersion");
            if (!f || !rt) return printf("no ext_runtime_version in %s\n", argv[1]), 1;
            report("dlopen-ext", rt, f());
        }
    }
    return 0;
}

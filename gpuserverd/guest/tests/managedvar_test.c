/* A module's managed variables (__managed__ in CUDA C++, .attribute(.managed) in PTX; NVIDIA's
 * uvmlite): cuModuleGetGlobal's address is managed memory, its host pointer the same address, and
 * the program reads there what the module and its kernels put in the variable and writes there
 * what a kernel then reads, over either transport (the server holds the variable; the guest keeps
 * a coherent shadow at its address). Variables sharing a page with the module's other globals
 * carry only their own bytes: a global the device wrote is left as it was. Prints
 * "managedvar_test: OK". */
#include "check.h"

#include <stdint.h>

/* The simulated backend's module (backend/sim/module.go): two small managed variables with their
 * initial values, a plain global between them, and one managed variable over several pages. */
static const char image[] = "GPUSIM-MODULE 1\nkernel fill_u32\n"
                            "global xxx 4 managed 10\nglobal plain 64\nglobal yyy 4 managed 100\n"
                            "global big 40000 managed 7\n";

static CUdeviceptr global(CUmodule m, const char *name, size_t want) {
    CUdeviceptr p;
    size_t n;
    CHECK(cuModuleGetGlobal(&p, &n, m, name));
    EXPECT(n == want);
    return p;
}

static void fill(CUfunction f, CUdeviceptr p, unsigned v, int n) {
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(f, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

int main(void) {
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CHECK(cuInit(0));
    CHECK(cuCtxCreate(&ctx, 0, 0));
    CHECK(cuModuleLoadData(&m, image));
    CHECK(cuModuleGetFunction(&f, m, "fill_u32"));
    CUdeviceptr xxx = global(m, "xxx", 4), yyy = global(m, "yyy", 4), plain = global(m, "plain", 64);
    CUdeviceptr big = global(m, "big", 40000);
    EXPECT(global(m, "xxx", 4) == xxx); /* asked again: the same */
    unsigned managed = 0;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, xxx));
    EXPECT(managed == 1);
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
    EXPECT(managed == 0);
    int *px, *py;
    CHECK(cuPointerGetAttribute(&px, CU_POINTER_ATTRIBUTE_HOST_POINTER, xxx));
    CHECK(cuPointerGetAttribute(&py, CU_POINTER_ATTRIBUTE_HOST_POINTER, yyy));
    EXPECT(px == (int *)(uintptr_t)xxx && py == (int *)(uintptr_t)yyy);
    unsigned *pb = (unsigned *)(uintptr_t)big;

    /* The module's initial values, read by the host. */
    EXPECT(*px == 10 && *py == 100 && pb[0] == 7 && pb[1] == 0);
    /* The device writes the plain global; the host then writes the variables beside it. */
    fill(f, plain, 0xabcd, 16);
    CHECK(cuCtxSynchronize());
    *px += 1;
    *py += 11;
    unsigned got[16];
    CHECK(cuMemcpyDtoH(got, xxx, 4)); /* the device reads the host's write */
    EXPECT(got[0] == 11);
    CHECK(cuMemcpyDtoH(got, yyy, 4));
    EXPECT(got[0] == 111);
    CHECK(cuMemcpyDtoH(got, plain, 64)); /* and the plain global is as the device left it */
    for (int i = 0; i < 16; i++) EXPECT(got[i] == 0xabcd);

    /* A kernel writes the variables; the host reads what it wrote. */
    fill(f, xxx, 42, 1);
    fill(f, big, 3, 10000);
    CHECK(cuCtxSynchronize());
    EXPECT(*px == 42 && *py == 111 && pb[0] == 3 && pb[9999] == 3);
    pb[5000] = 9; /* a write to one page of the large variable goes to the device at the next call */
    CHECK(cuMemcpyDtoH(got, big + 5000 * 4, 8));
    EXPECT(got[0] == 9 && got[1] == 3);

    CHECK(cuModuleUnload(m));
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, xxx));
    EXPECT(managed == 0); /* gone with its module */
    CHECK(cuCtxDestroy(ctx));
    printf("managedvar_test: OK\n");
    return 0;
}

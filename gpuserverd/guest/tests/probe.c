/* A small client for the server-side tests:
 *   probe init            prints "INIT <code> <name>"
 *   probe init-wait       the same, then waits for a line on stdin before it exits
 *   probe hold <MiB>      allocates and fills MiB, prints "HELD <address>", then waits for a line on stdin
 *                         and checks the memory still holds its pattern ("INTACT", or "LOST" with
 *                         the error and "AFTER" with the results of later calls)
 *   probe quota <MiB>     allocates MiB-sized blocks until one fails; prints "BLOCKS <n> <name>"
 *   probe peek <hex>      reads 4 bytes at a device address it never allocated; prints "PEEK <code>"
 *   probe attr <n>...     prints "ATTR <n> <value>" for each device attribute n of device 0 */
#include "check.h"

#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    CUresult rc = cuInit(0);
    if (!strcmp(argv[1], "init") || !strcmp(argv[1], "init-wait")) {
        printf("INIT %d %s\n", rc, errname(rc));
        fflush(stdout);
        char line[16];
        if (!strcmp(argv[1], "init-wait") && !fgets(line, sizeof line, stdin)) return 3;
        return 0;
    }
    CHECK(rc);
    if (!strcmp(argv[1], "attr")) {
        for (int i = 2; i < argc; i++) {
            int v = -1, a = atoi(argv[i]);
            CHECK(cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0));
            printf("ATTR %d %d\n", a, v);
        }
        return 0;
    }
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 1, n = mib << 20;
    if (!strcmp(argv[1], "hold")) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, n));
        CHECK(cuMemsetD32(p, 0x600dcafe, n / 4));
        printf("HELD %llx\n", (unsigned long long)p);
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 3;
        /* A queued call goes out from the flusher thread, to a server that may be gone: the calls
         * after it must fail cleanly, not hang or kill the program. */
        CHECK(cuMemsetD32Async(p, 0, 1, NULL));
        usleep(100000);
        unsigned v = 0;
        rc = cuMemcpyDtoH(&v, p + n - 4, 4);
        if (rc == CUDA_SUCCESS && v == 0x600dcafe) {
            printf("INTACT\n");
            return 0;
        }
        printf("LOST %d %s\n", rc, errname(rc));
        /* Later calls fail too, at once. */
        for (int i = 0; i < 3; i++) rc = cuMemsetD32Async(p, 0, 1, NULL);
        CUresult sync = cuCtxSynchronize();
        printf("AFTER %d %d\n", rc, sync);
        return 0;
    }
    if (!strcmp(argv[1], "peek")) { /* read 4 bytes at a device address this session never allocated */
        unsigned long long addr = strtoull(argv[2], NULL, 16);
        unsigned v = 0;
        rc = cuMemcpyDtoH(&v, (CUdeviceptr)addr, 4);
        printf("PEEK %d %s %x\n", rc, errname(rc), v);
        return 0;
    }
    if (!strcmp(argv[1], "quota")) {
        int blocks = 0;
        CUdeviceptr p;
        while (blocks < 1000 && (rc = cuMemAlloc(&p, n)) == CUDA_SUCCESS) blocks++;
        size_t free, total;
        CHECK(cuMemGetInfo(&free, &total));
        printf("BLOCKS %d %s total %zu\n", blocks, errname(rc), total);
        return 0;
    }
    return 2;
}

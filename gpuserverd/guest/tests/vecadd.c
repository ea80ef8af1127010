/* vecadd: the small CUDA program a VM runs through its ivshmem channel (guesttest's VM test, built
 * there statically with the guest library), and on the host over any endpoint. Pinned buffers
 * (cuMemAllocHost: from the shared region when there is one), a kernel launch, a pageable copy
 * back, checked element by element. Prints "VECADD OK <n>". */
#include "check.h"

int main(void) {
    CUfunction add = sim_kernel("vector_add_f32", NULL);
    enum { N = 1 << 20 };
    float *a, *b, *c = malloc(N * sizeof *c);
    CHECK(cuMemAllocHost((void **)&a, N * sizeof *a));
    CHECK(cuMemAllocHost((void **)&b, N * sizeof *b));
    EXPECT(c != NULL);
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * (float)(N - i);
    }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, N * sizeof *a));
    CHECK(cuMemAlloc(&db, N * sizeof *b));
    CHECK(cuMemAlloc(&dc, N * sizeof *c));
    CHECK(cuMemcpyHtoD(da, a, N * sizeof *a));
    CHECK(cuMemcpyHtoD(db, b, N * sizeof *b));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(c, dc, N * sizeof *c));
    for (int i = 0; i < N; i++)
        if (c[i] != a[i] + b[i]) {
            printf("VECADD WRONG at %d: %f + %f = %f\n", i, a[i], b[i], c[i]);
            return 1;
        }
    printf("VECADD OK %d\n", N);
    CHECK(cuMemFreeHost(a));
    CHECK(cuMemFreeHost(b));
    CHECK(cuCtxSynchronize());
    return 0;
}

/* jpeg_sim_test: gpucloud's libnvjpeg.so.13 over the guest libcuda and a real gpuserverd on the
 * simulated backend (guesttest/mathlibs_test.go): a handle made with the program's allocators (which
 * cannot run on the GPU server: said once), a state, a JPEG frame header read by
 * nvjpegGetImageInfo (the bytes staged to the server, the widths and heights staged back), a decode
 * the simulated backend does not compute, a refused call and a destroyed state. With "foreign" it
 * only checks that nvjpegCreateSimple fails over another libcuda. Declares what it
 * uses (CI has no nvjpeg.h). */
#include <cuda.h>
#include <string.h>

#include "gc_test_check.h"

typedef void *H;
enum { INVALID_PARAMETER = 2, NOT_SUPPORTED = 9, CSS_420 = 2, BACKEND_DEFAULT = 0, OUTPUT_RGB = 3 };
typedef struct {
    int (*dev_malloc)(void **, size_t);
    int (*dev_free)(void *);
} devAllocator;
int nvjpegCreateSimple(H *h);
int nvjpegCreateEx(int backend, devAllocator *dev, void *pinned, unsigned flags, H *h);
int nvjpegDestroy(H h);
int nvjpegJpegStateCreate(H h, H *state);
int nvjpegJpegStateDestroy(H state);
int nvjpegGetImageInfo(H h, const unsigned char *data, size_t length, int *nComponents, int *subsampling, int *widths,
                       int *heights);
int nvjpegDecode(H h, H state, const unsigned char *data, size_t length, int fmt, void *destination, void *stream);
int nvjpegDecodeBatched(H h, H state, const unsigned char *const *data, const size_t *lengths, void *dest, void *s);
int nvjpegGetProperty(int type, int *value);

static int never_malloc(void **p, size_t n) {
    (void)p, (void)n;
    return 1;
}
static int never_free(void *p) {
    (void)p;
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "foreign") == 0) {
        H h;
        CHECK(nvjpegCreateSimple(&h) == 1); /* NVJPEG_STATUS_NOT_INITIALIZED */
        printf("jpeg_sim_test foreign: OK\n");
        return 0;
    }
    int v = 0;
    OK(nvjpegGetProperty(0, &v));
    CHECK(v == 13);
    devAllocator a = {never_malloc, never_free};
    H h = NULL, st = NULL;
    OK(nvjpegCreateEx(BACKEND_DEFAULT, &a, NULL, 0, &h));
    CHECK(h != NULL);
    OK(nvjpegJpegStateCreate(h, &st));
    /* SOI, an APP0 segment, a baseline frame header of 33x17, Y 2x2 and Cb, Cr 1x1 (4:2:0), EOI. */
    const unsigned char jpg[] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 'h', 'i', 0xff, 0xc0, 0x00, 0x11, 8, 0, 17, 0, 33, 3,
                                 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1, 0xff, 0xd9};
    int nc = 0, css = -1, w[4] = {0}, hh[4] = {0};
    OK(nvjpegGetImageInfo(h, jpg, sizeof jpg, &nc, &css, w, hh));
    CHECK(nc == 3 && css == CSS_420);
    CHECK(w[0] == 33 && w[1] == 17 && w[2] == 17);
    CHECK(hh[0] == 17 && hh[1] == 9 && hh[2] == 9);
    CHECK(nvjpegGetImageInfo(h, jpg, 3, &nc, &css, w, hh) != 0); /* truncated: a bad JPEG */
    /* Decoding is NVIDIA's on the GPU: the simulated backend says it does not compute it. */
    struct {
        void *channel[4];
        size_t pitch[4];
    } img = {{0}, {0}};
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, 3 * 33 * 17) == CUDA_SUCCESS);
    img.channel[0] = (void *)(uintptr_t)out;
    img.pitch[0] = 3 * 33;
    CHECK(nvjpegDecode(h, st, jpg, sizeof jpg, OUTPUT_RGB, &img, NULL) == NOT_SUPPORTED);
    /* Refused: arrays of host pointers, twice (one notice). */
    const unsigned char *datas[1] = {jpg};
    size_t lens[1] = {sizeof jpg};
    CHECK(nvjpegDecodeBatched(h, st, datas, lens, &img, NULL) == NOT_SUPPORTED);
    CHECK(nvjpegDecodeBatched(h, st, datas, lens, &img, NULL) == NOT_SUPPORTED);
    OK(nvjpegJpegStateDestroy(st));
    CHECK(nvjpegDecode(h, st, jpg, sizeof jpg, OUTPUT_RGB, &img, NULL) == INVALID_PARAMETER);
    OK(nvjpegDestroy(h));
    printf("jpeg_sim_test: OK\n");
    return 0;
}

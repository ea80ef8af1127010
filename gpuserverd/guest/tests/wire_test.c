/* The generated C decoders: malformed payloads are refused with errors naming the field, and
 * payloads cross between the Go and C encoders intact.
 *   wire_test            run the malformed-payload checks
 *   wire_test encode     print a C-encoded LaunchKernel payload as hex
 *   wire_test decode HEX decode a DeviceInfoReply payload and print its fields */
#include "../wire_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

static void expect_err(const char *what, int rc, const char *err, const char *want) {
    if (rc == 0 || !strstr(err, want)) {
        fprintf(stderr, "%s: rc %d err \"%s\", want error containing \"%s\"\n", what, rc, err, want);
        fails++;
    }
}

int main(int argc, char **argv) {
    char err[256] = "";
    if (argc == 2 && !strcmp(argv[1], "encode")) {
        static const uint8_t params[] = {1, 2, 3, 4, 5};
        struct gw_launch_kernel m = {.function = 0x1122334455667788ull, .grid_x = 7, .grid_y = 8, .grid_z = 9,
                                     .block_x = 256, .block_y = 1, .block_z = 1, .shared_mem = 1024,
                                     .stream = 42, .params = params, .params_len = sizeof params};
        uint8_t buf[128];
        uint8_t *end = gw_launch_kernel_encode(&m, buf);
        if ((size_t)(end - buf) != gw_launch_kernel_size(&m)) return 1;
        for (uint8_t *p = buf; p < end; p++) printf("%02x", *p);
        printf("\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "decode")) {
        size_t n = strlen(argv[2]) / 2;
        uint8_t *p = malloc(n + 1);
        for (size_t i = 0; i < n; i++) sscanf(argv[2] + 2 * i, "%2hhx", &p[i]);
        struct gw_device_info_reply r;
        if (gw_device_info_reply_decode(&r, p, n, err, sizeof err) != 0) {
            printf("ERROR %s\n", err);
            return 1;
        }
        printf("name=%.*s uuid_len=%u total=%llu major=%d minor=%d pci=%.*s\n", (int)r.name_len, r.name,
               r.uuid_len, (unsigned long long)r.total_memory, r.major, r.minor, (int)r.pci_bus_id_len, r.pci_bus_id);
        return 0;
    }

    /* Truncated fixed field. */
    uint8_t three[3] = {1, 2, 3};
    struct gw_mem_alloc ma;
    expect_err("truncated", gw_mem_alloc_decode(&ma, three, sizeof three, err, sizeof err), err, "MemAlloc.bytes: truncated");
    /* A string over its limit. */
    uint8_t big[8] = {0, 0, 0, 0, 0x01, 0x10, 0, 0}; /* version 0, token length 4097 */
    struct gw_hello h;
    expect_err("limit", gw_hello_decode(&h, big, sizeof big, err, sizeof err), err, "Hello.token: length 4097 exceeds limit 4096");
    /* A length past the data. */
    uint8_t shortstr[8] = {0, 0, 0, 0, 10, 0, 0, 0};
    expect_err("short", gw_hello_decode(&h, shortstr, sizeof shortstr, err, sizeof err), err, "Hello.token: truncated");
    /* Trailing bytes. */
    uint8_t nine[9] = {0};
    struct gw_mem_free mf;
    expect_err("trailing", gw_mem_free_decode(&mf, nine, sizeof nine, err, sizeof err), err, "MemFree: 1 unexpected trailing bytes");
    /* A u32 list whose count exceeds its limit. */
    uint8_t lay[8] = {0, 0, 0, 0, 0x01, 0x04, 0, 0};
    struct gw_func_param_layout_reply fl;
    expect_err("count", gw_func_param_layout_reply_decode(&fl, lay, sizeof lay, err, sizeof err), err, "offsets: length 1025 exceeds limit 1024");
    /* The lanes' key: the guest takes exactly 32 bytes, and the decoder refuses more. */
    uint8_t lanes[12 + 33] = {0, 0, 0, 0, 4, 0, 0, 0, 33, 0, 0, 0};
    struct gw_lanes_open_reply lr;
    expect_err("lanes key", gw_lanes_open_reply_decode(&lr, lanes, sizeof lanes, err, sizeof err), err, "LanesOpenReply.key: length 33 exceeds limit 32");
    lanes[8] = 32;
    if (gw_lanes_open_reply_decode(&lr, lanes, sizeof lanes - 1, err, sizeof err) != 0 || lr.lanes != 4 || lr.key_len != 32) {
        fprintf(stderr, "good LanesOpenReply: %s\n", err);
        fails++;
    }
    if (fails) return 1;
    printf("wire_test: OK\n");
    return 0;
}

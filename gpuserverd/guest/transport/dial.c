/* Settings and sockets shared by the guest libraries (dial.h). */
#include "dial.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int gc_config_value(const char *key, char *out, size_t cap) {
    const char *path = getenv("GPUCLOUD_CONFIG");
    FILE *f = fopen(path ? path : GC_CONFIG_DEFAULT, "r");
    if (!f) return 0;
    char line[GC_MAX_VALUE + 64];
    int found = 0;
    size_t klen = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (strncmp(s, key, klen) != 0) continue;
        char *v = s + klen;
        while (*v == ' ' || *v == '\t') v++;
        if (*v != '=') continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\r\n")] = 0;
        snprintf(out, cap, "%s", v);
        found = 1;
    }
    fclose(f);
    return found;
}

int gc_setting(const char *env, const char *key, char *out, size_t cap) {
    const char *v = getenv(env);
    if (v && *v) {
        snprintf(out, cap, "%s", v);
        return 1;
    }
    return gc_config_value(key, out, cap) || gc_config_value(env, out, cap);
}

/* dial_unix connects to gpuserverd's Unix socket at path (a client on the same host). */
static int dial_unix(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) return -1;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

const char *gc_unix_path(const char *endpoint) {
    if (strncmp(endpoint, "unix:", 5) == 0) return endpoint + 5;
    if (strncmp(endpoint, "shm:", 4) == 0) return endpoint + 4;
    return NULL;
}

const char *gc_ivshmem_spec(const char *endpoint) {
    return strncmp(endpoint, "ivshmem:", 8) == 0 ? endpoint + 8 : NULL;
}

int gc_dial_socket(const char *endpoint) {
    if (gc_unix_path(endpoint)) return dial_unix(gc_unix_path(endpoint));
    char host[256], port[16];
    const char *colon = strrchr(endpoint, ':');
    if (!colon || colon == endpoint || (size_t)(colon - endpoint) >= sizeof host) return -1;
    memcpy(host, endpoint, colon - endpoint);
    host[colon - endpoint] = 0;
    if (host[0] == '[') { /* [v6]:port */
        memmove(host, host + 1, strlen(host));
        host[strcspn(host, "]")] = 0;
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        /* Small calls must not wait for Nagle. Buffer sizes are left to the kernel's autotuning:
         * setting them caps them at net.core.[rw]mem_max, often far below what autotuning reaches. */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

int gc_endpoints_setting(char *out, size_t cap) {
    const char *v = getenv("GPUCLOUD_ENDPOINT");
    if (v && *v) {
        snprintf(out, cap, "%s", v);
        return 1;
    }
    return gc_config_value("endpoints", out, cap) || gc_config_value("GPUCLOUD_ENDPOINTS", out, cap) ||
           gc_config_value("endpoint", out, cap) || gc_config_value("GPUCLOUD_ENDPOINT", out, cap);
}

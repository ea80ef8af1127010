/* How a guest library finds and reaches gpuserverd: its settings (the environment, then the
 * key=value file /etc/gpucloud/guest.conf that hostd's seed writes) and its sockets. Needs only
 * libc, so every guest library links it: the guest libcuda (conn.c) and libnvidia-ml (nvml/). */
#ifndef GPUCLOUD_DIAL_H
#define GPUCLOUD_DIAL_H

#include <stddef.h>

#define GC_CONFIG_DEFAULT "/etc/gpucloud/guest.conf"
#define GC_MAX_VALUE 4096

/* Reads key from the config file (GPUCLOUD_CONFIG, else GC_CONFIG_DEFAULT) into out; 1 if found. */
int gc_config_value(const char *key, char *out, size_t cap);
/* The environment's env wins; in the file either key= or env= is accepted. 1 if found. */
int gc_setting(const char *env, const char *key, char *out, size_t cap);
/* The endpoints to try, comma-separated: GPUCLOUD_ENDPOINT, else the file's list ("endpoints=" or
 * hostd's "GPUCLOUD_ENDPOINTS=": a VM's ivshmem channel first, then gpuserverd over TCP), else its
 * single endpoint. 1 if found. */
int gc_endpoints_setting(char *out, size_t cap);
/* The endpoint's Unix socket path ("unix:/path" or "shm:/path"), or NULL. */
const char *gc_unix_path(const char *endpoint);
/* The endpoint's ivshmem channel ("ivshmem:/sys/.../resource2", "ivshmem:auto"), or NULL. */
const char *gc_ivshmem_spec(const char *endpoint);
/* Connects to a socket endpoint: host:port, [v6]:port, unix:/path or shm:/path; -1 on failure. */
int gc_dial_socket(const char *endpoint);

#endif

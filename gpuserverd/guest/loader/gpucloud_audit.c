/* libgpucloud-audit.so: a glibc auditing library (rtld-audit(7), LD_AUDIT) that makes gpucloud's
 * CUDA libraries the ones a process loads, whatever the program's DT_RPATH, DT_RUNPATH or
 * LD_LIBRARY_PATH say, and whether the library is a DT_NEEDED entry or dlopen'ed later (as
 * PyTorch's are, from a Python extension whose DT_RPATH names the wheel's nvidia/.../lib).
 *
 * Why an auditor, not /etc/ld.so.preload: a preloaded library's soname does win over DT_RPATH
 * (the loader matches a DT_NEEDED name against the sonames already loaded before searching), but
 * ld.so reads /etc/ld.so.preload for every process with no way to leave it out, so no process
 * could opt out. LD_AUDIT is read from the environment: the guest image sets it for every login,
 * service and cron job, and a process opts out with GPUCLOUD_NATIVE=1 (or by unsetting LD_AUDIT).
 *
 * How: the loader calls la_objsearch with each name it is about to look for, first as asked
 * (LA_SER_ORIG), before any search path. For a CUDA library name (by basename: libcudart.so.13,
 * or .../nvidia/cu13/lib/libcublas.so.13 when a program loads it by path) of which gpucloud's
 * folder holds a file of that name, it answers that file's path instead; the loader then opens
 * that path (and reuses it if already loaded). Everything else is left alone.
 *
 * Settings (environment, read once):
 *   GPUCLOUD_NATIVE=1     redirect nothing (this process uses whatever its search paths find)
 *   GPUCLOUD_LIBDIR=dir   gpucloud's libraries (default /usr/lib/gpucloud)
 *   GPUCLOUD_AUDIT_LOG=f  append each loaded object's path to f, one a line (gpucloud-info's
 *                         command mode), and each redirection as "redirect NAME -> PATH"
 * Only la_version, la_objsearch and la_objopen are defined: no symbol binding is audited, so
 * calls through the PLT cost what they cost without it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The CUDA libraries' name prefixes gpucloud may ship; a name is redirected only when it starts
 * with one of these and gpucloud's folder has a file of exactly that name. */
static const char *const cuda_prefixes[] = {
    "libcuda.so",      "libcudart.so",   "libcublas.so",  "libcublasLt.so", "libcudnn",
    "libcufft.so",     "libcusparse.so", "libcusolver.so", "libnccl.so",    "libnvidia-ml.so",
    "libcupti.so",     "libcurand.so",   "libnvJitLink.so", "libnvjpeg.so",   "libnpp",
};

static int native;
static char libdir[PATH_MAX / 2];
static int log_fd = -1;
static __thread char answer[PATH_MAX];

unsigned int la_version(unsigned int version) {
    const char *v = getenv("GPUCLOUD_NATIVE");
    native = v && strcmp(v, "1") == 0;
    const char *d = getenv("GPUCLOUD_LIBDIR");
    if (!d || d[0] != '/' || strlen(d) >= sizeof libdir) d = "/usr/lib/gpucloud";
    snprintf(libdir, sizeof libdir, "%s", d);
    const char *log = getenv("GPUCLOUD_AUDIT_LOG");
    if (log && log[0]) log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    /* An older loader's interface version we cannot serve: 0 tells it to ignore this module. */
    return version >= 1 ? (version < LAV_CURRENT ? version : LAV_CURRENT) : 0;
}

/* log_line appends "WHAT A[ -> B]" to the log, in one write so lines of processes do not mix. */
static void log_line(const char *what, const char *a, const char *b) {
    if (log_fd < 0) return;
    char line[PATH_MAX * 2 + 32];
    int n = snprintf(line, sizeof line, "%s %s%s%s\n", what, a, b ? " -> " : "", b ? b : "");
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = write(log_fd, line, (size_t)n);
        (void)w;
    }
}

static int is_cuda_name(const char *base) {
    for (size_t i = 0; i < sizeof cuda_prefixes / sizeof cuda_prefixes[0]; i++)
        if (strncmp(base, cuda_prefixes[i], strlen(cuda_prefixes[i])) == 0) return 1;
    return 0;
}

char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    if (native || flag != LA_SER_ORIG || !name) return (char *)name;
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (!is_cuda_name(base)) return (char *)name;
    size_t dl = strlen(libdir);
    if (slash && (size_t)(slash - name) == dl && strncmp(name, libdir, dl) == 0) return (char *)name; /* ours */
    int n = snprintf(answer, sizeof answer, "%s/%s", libdir, base);
    if (n < 0 || (size_t)n >= sizeof answer || access(answer, R_OK) != 0) return (char *)name;
    log_line("redirect", name, answer);
    return answer;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    (void)lmid; (void)cookie;
    if (map && map->l_name && map->l_name[0]) log_line("loaded", map->l_name, NULL);
    return 0; /* no symbol binding audited */
}

/* Holding writers while a registered range's pages move (hostreg.c, shm.c). Moving pages is a
 * copy and then a new mapping over the old one; a write by another thread in between would land
 * in the old pages and be lost. userfaultfd's write-protect mode closes that window: once the
 * range is write-protected, a writer (in user or kernel mode) waits in the kernel; when the
 * descriptor is closed, after the new mapping is in place, it retries and its write lands in the
 * new pages. Reads go on undisturbed.
 *
 * Needs a kernel with userfaultfd write-protection (5.7; 5.19 for shared memory) and
 * MADV_POPULATE_WRITE (5.14), and a process allowed to use userfaultfd without
 * UFFD_USER_MODE_ONLY (root, or vm.unprivileged_userfaultfd=1): user-mode-only would fail a
 * kernel-mode write (read(2) into the range) with EFAULT instead of holding it. Otherwise the
 * window stays open (docs/gpuserverd/transports.md, "Registered host memory"). */
#define _GNU_SOURCE
#include "transport.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(UFFDIO_WRITEPROTECT) && defined(UFFD_FEATURE_WP_HUGETLBFS_SHMEM) && defined(MADV_POPULATE_WRITE) && \
    defined(SYS_userfaultfd)
int gc_hold_writes(void *va, size_t len, int shared) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    uint64_t need = UFFD_FEATURE_PAGEFAULT_FLAG_WP | (shared ? UFFD_FEATURE_WP_HUGETLBFS_SHMEM : 0);
    struct uffdio_api api = {.api = UFFD_API, .features = need};
    struct uffdio_register reg = {.range = {(uintptr_t)va, len}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect wp = {.range = {(uintptr_t)va, len}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    /* Write-protection marks present pages only: make every page present and writable first. */
    if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & need) != need || madvise(va, len, MADV_POPULATE_WRITE) != 0 ||
        ioctl(fd, UFFDIO_REGISTER, &reg) != 0 || ioctl(fd, UFFDIO_WRITEPROTECT, &wp) != 0) {
        close(fd); /* unregisters whatever was registered, waking anyone held */
        return -1;
    }
    return fd;
}
#else
int gc_hold_writes(void *va, size_t len, int shared) {
    (void)va, (void)len, (void)shared;
    return -1;
}
#endif

void gc_release_writes(int fd) {
    if (fd >= 0) close(fd); /* held writers retry, now on the new mapping */
}

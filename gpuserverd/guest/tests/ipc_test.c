/* IPC between two processes of one instance, each its own session (guest/driver/ipc.c), as
 * NVIDIA's samples do it: the parent exports, then forks and execs a child (GPUCLOUD_TOKEN set
 * to IPC_PEER_TOKEN: a session of the same instance, or of another one) to which it passes what
 * it exported over a socket pair, file descriptors with SCM_RIGHTS.
 *
 *   ipc_test legacy|vmm|pool [foreign]
 *
 * legacy: cuIpcGetMemHandle and an interprocess event; the child waits behind a slow kernel,
 *         writes the memory and records the event; the parent's cuEventSynchronize waits for it.
 * vmm:    a cuMemCreate allocation's shareable handle (a POSIX fd), mapped in both processes.
 * pool:   a pool's shareable handle and an allocation's export data.
 * With "foreign" the child's session is another instance's: every open is refused with
 * CUDA_ERROR_INVALID_HANDLE and nothing is allocated. Prints "ipc_test: OK" on success. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define SIZE (2u << 20)

struct msg {
    CUipcMemHandle mem;
    CUipcEventHandle event;
    CUmemPoolPtrExportData ptr;
};

static void send_msg(int sock, const struct msg *m, int fd) {
    struct iovec iov = {(void *)m, sizeof *m};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(ctl, 0, sizeof ctl);
        h.msg_control = ctl, h.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    EXPECT(sendmsg(sock, &h, 0) == (ssize_t)sizeof *m);
}

static int recv_msg(int sock, struct msg *m) {
    struct iovec iov = {m, sizeof *m};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    EXPECT(recvmsg(sock, &h, 0) == (ssize_t)sizeof *m);
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static void byte_signal(int sock) { EXPECT(write(sock, "x", 1) == 1); }
static void byte_wait(int sock) {
    char c;
    EXPECT(read(sock, &c, 1) == 1);
}

static int all(const unsigned char *b, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

/* What the program may not do to what it opened, and what is not a handle at all: each answer is
 * a clear error, and none of them allocates device memory. */
static void bad_handles(void) {
    size_t free0, free1, total;
    CHECK(cuMemGetInfo(&free0, &total));
    CUipcMemHandle h;
    for (size_t i = 0; i < sizeof h; i++) h.reserved[i] = (char)(rand() & 0xff);
    CUdeviceptr p;
    EXPECT_RC(cuIpcOpenMemHandle(&p, h, 0), CUDA_ERROR_INVALID_HANDLE);
    memcpy(h.reserved, "gcIP\x01\x01", 6); /* the right form, with a key nobody filed */
    EXPECT_RC(cuIpcOpenMemHandle(&p, h, 0), CUDA_ERROR_INVALID_HANDLE);
    CUipcEventHandle eh;
    memset(&eh, 0, sizeof eh);
    CUevent e;
    EXPECT_RC(cuIpcOpenEventHandle(&e, eh), CUDA_ERROR_INVALID_HANDLE);
    int pipefd[2];
    EXPECT(pipe(pipefd) == 0);
    CUmemGenericAllocationHandle a;
    EXPECT_RC(cuMemImportFromShareableHandle(&a, (void *)(intptr_t)pipefd[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    close(pipefd[0]), close(pipefd[1]);
    EXPECT_RC(cuIpcCloseMemHandle(0x1234), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetInfo(&free1, &total));
    EXPECT(free1 == free0);
}

/* ---- the child: opens what the parent passed ---- */

static void child_legacy(int sock, int foreign) {
    struct msg m;
    recv_msg(sock, &m);
    CUfunction spin = sim_kernel("spin", NULL);
    CUdeviceptr p;
    CUevent e;
    if (foreign) {
        EXPECT_RC(cuIpcOpenMemHandle(&p, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_HANDLE);
        EXPECT_RC(cuIpcOpenEventHandle(&e, m.event), CUDA_ERROR_INVALID_HANDLE);
        bad_handles();
        return;
    }
    CHECK(cuIpcOpenMemHandle(&p, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuIpcOpenEventHandle(&e, m.event));
    static unsigned char buf[SIZE];
    CHECK(cuMemcpyDtoH(buf, p, SIZE));
    EXPECT(all(buf, SIZE, 0x11)); /* the parent's bytes */
    EXPECT_RC(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* imported memory is closed, not freed */
    CUipcMemHandle again;
    EXPECT_RC(cuIpcGetMemHandle(&again, p), CUDA_ERROR_INVALID_VALUE); /* nor exported again */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long ns = 300000000ull; /* the write comes well after the parent starts waiting */
    void *args[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuMemsetD8Async(p, 0x22, SIZE, s));
    CHECK(cuEventRecord(e, s));
    cuEventQuery(e); /* a call that waits: the worker has taken the record before the parent is told */
    byte_signal(sock);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuIpcCloseMemHandle(p));
    EXPECT_RC(cuMemcpyDtoH(buf, p, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuEventDestroy(e));
    bad_handles();
}

static void child_vmm(int sock, int foreign) {
    struct msg m;
    int fd = recv_msg(sock, &m);
    EXPECT(fd >= 0);
    sim_kernel("spin", NULL);
    CUmemGenericAllocationHandle a;
    if (foreign) {
        EXPECT_RC(cuMemImportFromShareableHandle(&a, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  CUDA_ERROR_INVALID_HANDLE);
        close(fd);
        return;
    }
    CHECK(cuMemImportFromShareableHandle(&a, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUdeviceptr p;
    CHECK(cuMemAddressReserve(&p, SIZE, 0, 0, 0));
    CHECK(cuMemMap(p, SIZE, 0, a, 0));
    CHECK(cuMemRelease(a)); /* the mapping keeps it, as memMapIPCDrv does */
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, SIZE, &acc, 1));
    static unsigned char buf[SIZE];
    CHECK(cuMemcpyDtoH(buf, p, SIZE));
    EXPECT(all(buf, SIZE, 0x33));
    CHECK(cuMemsetD8(p, 0x44, SIZE));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemUnmap(p, SIZE));
    CHECK(cuMemAddressFree(p, SIZE));
}

static void child_pool(int sock, int foreign) {
    struct msg m;
    int fd = recv_msg(sock, &m);
    EXPECT(fd >= 0);
    sim_kernel("spin", NULL);
    CUmemoryPool pool;
    if (foreign) {
        EXPECT_RC(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                  CUDA_ERROR_INVALID_HANDLE);
        close(fd);
        return;
    }
    CHECK(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemAccess_flags fl;
    CHECK(cuMemPoolGetAccess(&fl, pool, &loc));
    EXPECT(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr p;
    CHECK(cuMemPoolImportPointer(&p, pool, &m.ptr));
    static unsigned char buf[SIZE];
    CHECK(cuMemcpyDtoH(buf, p, SIZE));
    EXPECT(all(buf, SIZE, 0x55));
    CHECK(cuMemsetD8(p, 0x66, SIZE));
    CHECK(cuMemFreeAsync(p, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemPoolDestroy(pool));
}

/* ---- the parent: exports, starts the child, checks what it wrote ---- */

static pid_t spawn(const char *self, const char *mode, int sock, int foreign) {
    const char *peer = getenv("IPC_PEER_TOKEN");
    EXPECT(peer != NULL);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) { /* a new process of the VM: its own session, by exec, as the samples do */
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sock);
        setenv("GPUCLOUD_TOKEN", peer, 1);
        execl(self, self, "child", mode, fd, foreign ? "foreign" : "same", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void reap(pid_t pid) {
    int st;
    EXPECT(waitpid(pid, &st, 0) == pid);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void parent_legacy(const char *self, int foreign) {
    sim_kernel("spin", NULL);
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, SIZE));
    CHECK(cuMemsetD8(p, 0x11, SIZE));
    struct msg m;
    memset(&m, 0, sizeof m);
    CHECK(cuIpcGetMemHandle(&m.mem, p));
    CUipcMemHandle twice;
    CHECK(cuIpcGetMemHandle(&twice, p));
    EXPECT(memcmp(&twice, &m.mem, sizeof twice) == 0); /* one object, one handle */
    CUevent e, timed;
    CHECK(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuIpcGetEventHandle(&m.event, e));
    CHECK(cuEventCreate(&timed, 0));
    EXPECT(cuIpcGetEventHandle(&m.event, timed) != CUDA_SUCCESS); /* not an interprocess event */
    CHECK(cuIpcGetEventHandle(&m.event, e));
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t pid = spawn(self, "legacy", sv[1], foreign);
    close(sv[1]);
    send_msg(sv[0], &m, -1);
    if (!foreign) {
        byte_wait(sv[0]);
        CHECK(cuEventSynchronize(e)); /* the child's record, behind its slow kernel */
        static unsigned char buf[SIZE];
        CHECK(cuMemcpyDtoH(buf, p, SIZE));
        EXPECT(all(buf, SIZE, 0x22));
    }
    reap(pid);
    CHECK(cuEventDestroy(e));
    CHECK(cuMemFree(p));
}

static void parent_vmm(const char *self, int foreign) {
    sim_kernel("spin", NULL);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    /* As memMapIPCDrv: granularity, create and export with no context current (NVIDIA's driver
     * needs none for them), which leaves none current. */
    CUcontext ctx, none;
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuCtxSetCurrent(NULL));
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran > 0 && SIZE % gran == 0);
    CUmemGenericAllocationHandle a;
    CHECK(cuMemCreate(&a, SIZE, &prop, 0));
    int fd = -1;
    EXPECT_RC(cuMemExportToShareableHandle(&fd, a, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemExportToShareableHandle(&fd, a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(cuCtxGetCurrent(&none));
    EXPECT(none == NULL);
    EXPECT_RC(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_INVALID_CONTEXT); /* other calls still need one */
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr p;
    CHECK(cuMemAddressReserve(&p, SIZE, 0, 0, 0));
    CHECK(cuMemMap(p, SIZE, 0, a, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, SIZE, &acc, 1));
    CHECK(cuMemsetD8(p, 0x33, SIZE));
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t pid = spawn(self, "vmm", sv[1], foreign);
    close(sv[1]);
    struct msg m;
    memset(&m, 0, sizeof m);
    send_msg(sv[0], &m, fd);
    close(fd); /* the program's descriptor: the export lives on until the allocation goes */
    reap(pid);
    static unsigned char buf[SIZE];
    CHECK(cuMemcpyDtoH(buf, p, SIZE));
    EXPECT(all(buf, SIZE, foreign ? 0x33 : 0x44));
    CHECK(cuMemUnmap(p, SIZE));
    CHECK(cuMemAddressFree(p, SIZE));
    CHECK(cuCtxSetCurrent(NULL));
    CHECK(cuMemRelease(a));
    CHECK(cuCtxSetCurrent(ctx));
}

static void parent_pool(const char *self, int foreign) {
    sim_kernel("spin", NULL);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr p;
    CHECK(cuMemAllocFromPoolAsync(&p, SIZE, pool, NULL));
    CHECK(cuMemsetD8(p, 0x55, SIZE));
    int fd = -1;
    CHECK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    struct msg m;
    memset(&m, 0, sizeof m);
    CHECK(cuMemPoolExportPointer(&m.ptr, p));
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t pid = spawn(self, "pool", sv[1], foreign);
    close(sv[1]);
    send_msg(sv[0], &m, fd);
    close(fd);
    reap(pid);
    static unsigned char buf[SIZE];
    CHECK(cuMemcpyDtoH(buf, p, SIZE));
    EXPECT(all(buf, SIZE, foreign ? 0x55 : 0x66));
    CHECK(cuMemFreeAsync(p, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemPoolDestroy(pool));
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "child") == 0) {
        int sock = atoi(argv[3]), foreign = strcmp(argv[4], "foreign") == 0;
        if (strcmp(argv[2], "legacy") == 0) child_legacy(sock, foreign);
        else if (strcmp(argv[2], "vmm") == 0) child_vmm(sock, foreign);
        else child_pool(sock, foreign);
        printf("ipc_test child (%s, %s): OK\n", argv[2], argv[4]);
        return 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: ipc_test legacy|vmm|pool [foreign]\n");
        return 2;
    }
    int foreign = argc > 2 && strcmp(argv[2], "foreign") == 0;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    EXPECT(n > 0);
    self[n] = 0;
    if (strcmp(argv[1], "legacy") == 0) parent_legacy(self, foreign);
    else if (strcmp(argv[1], "vmm") == 0) parent_vmm(self, foreign);
    else parent_pool(self, foreign);
    printf("ipc_test: OK\n");
    return 0;
}

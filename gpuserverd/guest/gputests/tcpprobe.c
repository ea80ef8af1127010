/* tcpprobe: the ceiling of loopback TCP on this machine, for the guest library's data path.
 * Moves TOTAL bytes from senders to receivers over S connections (one sender and one receiver
 * thread each, 4 MiB writes and reads, as the guest library and gpuserverd do) and prints GB/s
 * for S = 1, 2, 4, 8, plus one thread's memcpy rate for scale. No CUDA; plain C and pthreads.
 *
 *   tcpprobe [total MiB, default 4096]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (4u << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct lane {
    int fd;
    size_t bytes;
    char *buf;
};

static void *sender(void *p) {
    struct lane *l = p;
    for (size_t off = 0; off < l->bytes;) {
        size_t n = l->bytes - off < CHUNK ? l->bytes - off : CHUNK;
        for (size_t d = 0; d < n;) {
            ssize_t w = send(l->fd, l->buf + d, n - d, MSG_NOSIGNAL);
            if (w <= 0) { perror("send"); exit(1); }
            d += (size_t)w;
        }
        off += n;
    }
    return NULL;
}

static void *receiver(void *p) {
    struct lane *l = p;
    for (size_t off = 0; off < l->bytes;) {
        size_t n = l->bytes - off < CHUNK ? l->bytes - off : CHUNK;
        for (size_t d = 0; d < n;) {
            ssize_t r = recv(l->fd, l->buf + d, n - d, 0);
            if (r <= 0) { perror("recv"); exit(1); }
            d += (size_t)r;
        }
        off += n;
    }
    return NULL;
}

static double run(int streams, size_t total) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, 64) || getsockname(ls, (void *)&a, &al)) { perror("listen"); exit(1); }
    struct lane tx[16], rx[16];
    pthread_t tt[16], rt[16];
    for (int i = 0; i < streams; i++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (void *)&a, sizeof a)) { perror("connect"); exit(1); }
        int s = accept(ls, NULL, NULL);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        tx[i] = (struct lane){c, total / streams, malloc(CHUNK)};
        rx[i] = (struct lane){s, total / streams, malloc(CHUNK)};
        memset(tx[i].buf, i, CHUNK);
        memset(rx[i].buf, 0, CHUNK);
    }
    double t0 = now();
    for (int i = 0; i < streams; i++) {
        pthread_create(&rt[i], NULL, receiver, &rx[i]);
        pthread_create(&tt[i], NULL, sender, &tx[i]);
    }
    for (int i = 0; i < streams; i++) {
        pthread_join(tt[i], NULL);
        pthread_join(rt[i], NULL);
    }
    double dt = now() - t0;
    for (int i = 0; i < streams; i++) {
        close(tx[i].fd); close(rx[i].fd); free(tx[i].buf); free(rx[i].buf);
    }
    close(ls);
    return (double)(total / streams * streams) / dt / 1e9;
}

int main(int argc, char **argv) {
    size_t total = (size_t)(argc > 1 ? atol(argv[1]) : 4096) << 20;
    size_t mb = 256u << 20;
    char *x = malloc(mb), *y = malloc(mb);
    memset(x, 1, mb); memset(y, 2, mb);
    double t0 = now();
    for (int i = 0; i < 4; i++) {
        x[i] = (char)i; /* a different copy each time, and its result read below */
        memcpy(y, x, mb);
    }
    printf("memcpy_1thread %.2f GB/s (check %d)\n", 4.0 * mb / (now() - t0) / 1e9, y[3] + y[mb - 1]);
    free(x); free(y);
    int counts[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        double best = 0;
        for (int rep = 0; rep < 3; rep++) {
            double g = run(counts[i], total);
            if (g > best) best = g;
        }
        printf("tcp_loopback_streams_%d %.2f GB/s (best of 3, %zu MiB)\n", counts[i], best, total >> 20);
        fflush(stdout);
    }
    return 0;
}

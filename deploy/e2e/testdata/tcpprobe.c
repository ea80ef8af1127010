/* tcpprobe: open a TCP connection to each IPv4 HOST:PORT at once and say, per target, whether it
 * connected ("open"), was refused ("refused": a reset), got no answer within TIMEOUT seconds
 * ("timeout") or failed otherwise ("error <reason>"). The real-VM isolation test runs it inside a
 * guest: a connection attempt, not a guess, with an outcome that tells a filter from a closed port.
 *
 *   tcpprobe TIMEOUT HOST:PORT...
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TARGETS 32

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse(const char *arg, struct sockaddr_in *sa) {
  char host[64];
  const char *colon = strrchr(arg, ':');
  if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof host) return -1;
  memcpy(host, arg, colon - arg);
  host[colon - arg] = 0;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 1 || port > 65535) return -1;
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((unsigned short)port);
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* describe names a failed connection's errno: a reset is "refused", anything else its reason. */
static const char *describe(int err, char *buf, size_t size) {
  if (err == ECONNREFUSED) return "refused";
  snprintf(buf, size, "error %s", strerror(err));
  return buf;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc - 2 > MAX_TARGETS || atoi(argv[1]) < 1) {
    fprintf(stderr, "usage: tcpprobe TIMEOUT_SECONDS HOST:PORT... (at most %d)\n", MAX_TARGETS);
    return 2;
  }
  int n = argc - 2;
  struct pollfd pfd[MAX_TARGETS];
  const char *result[MAX_TARGETS];
  char reason[MAX_TARGETS][96];
  for (int i = 0; i < n; i++) {
    struct sockaddr_in sa;
    result[i] = NULL;
    pfd[i].fd = -1;
    pfd[i].events = POLLOUT;
    if (parse(argv[i + 2], &sa) != 0) {
      fprintf(stderr, "tcpprobe: %s: want IPv4:port\n", argv[i + 2]);
      return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      perror("tcpprobe: socket");
      return 2;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      result[i] = "open";
      close(fd);
    } else if (errno == EINPROGRESS) {
      pfd[i].fd = fd;
    } else {
      result[i] = describe(errno, reason[i], sizeof reason[i]);
      close(fd);
    }
  }
  long long deadline = now_ms() + 1000LL * atoi(argv[1]);
  for (;;) {
    int pending = 0;
    for (int i = 0; i < n; i++) pending += pfd[i].fd >= 0;
    long long left = deadline - now_ms();
    if (!pending || left <= 0) break;
    if (poll(pfd, n, (int)left) < 0 && errno != EINTR) {
      perror("tcpprobe: poll");
      return 2;
    }
    for (int i = 0; i < n; i++) {
      if (pfd[i].fd < 0 || !pfd[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(pfd[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      result[i] = err == 0 ? "open" : describe(err, reason[i], sizeof reason[i]);
      close(pfd[i].fd);
      pfd[i].fd = -1;
    }
  }
  for (int i = 0; i < n; i++) {
    if (pfd[i].fd >= 0) close(pfd[i].fd);
    printf("%s %s\n", argv[i + 2], result[i] ? result[i] : "timeout");
  }
  return 0;
}

// Package netnstest builds throw-away network namespaces for tests that send real packets:
// every address a test dials lives in a namespace the test made, never in the machine's own.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Require skips the test unless it runs as root with ip and nft installed (scripts/install-deps.sh
// installs iproute2 and nftables). A skip is silent in a plain `go test ./...`: with
// GPUCLOUD_REQUIRE_NETNS=1 (CI, .ci/run) it is a failure instead.
func Require(t testing.TB) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("GPUCLOUD_REQUIRE_NETNS") == "1" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("needs root to make network namespaces and nftables rules (run as root, e.g. in CI)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("needs %s (scripts/install-deps.sh installs iproute2 and nftables): %v", tool, err)
		}
	}
}

// Add makes a named network namespace (removed when the test ends) with its loopback up, and
// returns its name: prefix and this process's id, so parallel runs never share one.
func Add(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	_ = exec.Command("ip", "netns", "del", name).Run() // left by a killed run
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Exec(t, name, "ip", "link", "set", "lo", "up")
	return name
}

// Run runs a command and fails the test, with its output, when it fails.
func Run(t testing.TB, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// Exec runs a command inside namespace ns.
func Exec(t testing.TB, ns string, argv ...string) {
	t.Helper()
	Run(t, append([]string{"ip", "netns", "exec", ns}, argv...)...)
}

// In runs fn on a thread switched into namespace ns; sockets fn opens belong to ns for good.
// The thread is never switched back: it ends with its goroutine, so no other code runs in ns.
func In(ns string, fn func() error) error { return InAs(ns, -1, fn) }

// InAs is In with the thread's user switched to uid (when uid >= 0): sockets fn opens are
// owned by uid, as a QEMU running as its own user owns its guest's connections. Only that
// thread changes user (a raw setresuid, not Go's all-threads one), and it dies with fn.
func InAs(ns string, uid int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: Go retires the thread when the goroutine ends
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		if uid >= 0 {
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
				errc <- fmt.Errorf("setresuid %d: %w", uid, e)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a TCP listener at addr inside ns that greets every connection with "hi" and
// closes it; closed when the test ends.
func Listen(t testing.TB, ns, addr string) { t.Helper(); ListenAs(t, ns, -1, addr) }

// ListenAs is Listen with the listening socket (and the connections it accepts) owned by uid.
func ListenAs(t testing.TB, ns string, uid int, addr string) {
	t.Helper()
	var l net.Listener
	if err := InAs(ns, uid, func() (err error) { l, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
}

// Reach reports whether a TCP connection from namespace ns to addr completes and gets the
// listener's greeting within timeout; the error says why not.
func Reach(ns, addr string, timeout time.Duration) error { return ReachAs(ns, -1, addr, timeout) }

// ReachAs is Reach from a socket owned by uid (see InAs).
func ReachAs(ns string, uid int, addr string, timeout time.Duration) error {
	return InAs(ns, uid, func() error {
		c, err := net.DialTimeout("tcp4", addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 2)
		if _, err := c.Read(buf); err != nil {
			return fmt.Errorf("read greeting: %w", err)
		}
		if string(buf) != "hi" {
			return errors.New("unexpected greeting " + string(buf))
		}
		return nil
	})
}

package worker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// blockingConn is the session's socket used with blocking system calls on the serving thread
// instead of Go's network poller: a worker serves one connection from one locked thread, and a
// read that sleeps in the kernel wakes straight into the call it serves, without the poller's
// park, epoll and reschedule on every request. That hop is most of a small call's round trip.
type blockingConn struct {
	f     *os.File
	fd    int
	idle  bool // between frames: a quiet client is waited for without limit
	stall time.Duration
}

// newBlockingConn takes over fd (a connected TCP socket); a frame may stall at most stall.
func newBlockingConn(fd int, stall time.Duration) (*blockingConn, error) {
	if err := syscall.SetNonblock(fd, false); err != nil {
		return nil, fmt.Errorf("socket fd %d to blocking mode: %w", fd, err)
	}
	// No stalled client may hold a worker forever in the middle of a frame: the kernel times reads
	// out (deadlines cannot, on a blocking descriptor), and Read retries only between frames.
	tv := syscall.NsecToTimeval(int64(stall))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("socket fd %d receive timeout: %w", fd, err)
	}
	// A non-pollable os.File reads and writes with plain blocking system calls.
	return &blockingConn{f: os.NewFile(uintptr(fd), "conn"), fd: fd, stall: stall}, nil
}

func (c *blockingConn) Read(p []byte) (int, error) {
	for {
		n, err := c.f.Read(p)
		if !errors.Is(err, syscall.EAGAIN) || n > 0 {
			return n, err
		}
		if !c.idle {
			return 0, fmt.Errorf("client stalled mid-frame for %v: %w", c.stall, os.ErrDeadlineExceeded)
		}
	}
}

func (c *blockingConn) Write(p []byte) (int, error) { return c.f.Write(p) }

// Close shuts the socket down first, which wakes a read blocked on it in another goroutine.
func (c *blockingConn) Close() error {
	syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	return c.f.Close()
}

func (c *blockingConn) LocalAddr() net.Addr           { return nil }
func (c *blockingConn) RemoteAddr() net.Addr          { return nil }
func (c *blockingConn) SetDeadline(t time.Time) error { return nil }

// SetReadDeadline with the zero time marks the wait between frames (no limit); any other time
// marks a frame in progress, limited by the socket's receive timeout instead of t.
func (c *blockingConn) SetReadDeadline(t time.Time) error  { c.idle = t.IsZero(); return nil }
func (c *blockingConn) SetWriteDeadline(t time.Time) error { return nil }

// Package httplimits holds the limits every gpucloud HTTP server runs with: how long a client
// may take to send its headers and its body, how long an idle keep-alive connection stays open,
// how big the headers may be, and how many connections are served at once. Without them a few
// thousand clients sending their bodies a byte at a time hold connections for ever and the process
// runs out of file descriptors.
package httplimits

import (
	"net"
	"net/http"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of one HTTP server. A zero field takes the field of Default.
type Limits struct {
	// ReadHeaderTimeout bounds reading the request line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxConns is how many connections are served at once; more wait in the listen backlog.
	// 0 in Default: half of the process's open-file limit (the rest stays for the database,
	// files and outgoing connections).
	MaxConns int
}

// Default is what a server gets when it sets nothing: a usage batch (at most 4 MiB) reads in far
// less than ReadTimeout on any link a daemon uses.
var Default = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	IdleTimeout:       2 * time.Minute,
	MaxHeaderBytes:    64 << 10,
}

// resolved fills zero fields from Default and MaxConns from the open-file limit.
func (l Limits) resolved() Limits {
	d := Default
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConns <= 0 {
		l.MaxConns = halfFileLimit()
	}
	return l
}

// halfFileLimit is half the soft RLIMIT_NOFILE, at least 64 and at most 100,000.
func halfFileLimit() int {
	var rl syscall.Rlimit
	n := uint64(1024)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		n = rl.Cur
	}
	return int(min(max(n/2, 64), 100_000))
}

// Server returns an http.Server serving h within l.
func (l Limits) Server(h http.Handler) *http.Server {
	l = l.resolved()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listener bounds ln to l's MaxConns connections at once. A TLS listener's Accept returns before
// the handshake, so wrapping it or the TCP listener under it counts the same connections.
func (l Limits) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, l.resolved().MaxConns)
}

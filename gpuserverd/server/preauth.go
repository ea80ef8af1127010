package server

import (
	"net"
	"sync"
)

// Before a peer's token is verified it is nobody: what it may make gpuserverd hold is bounded
// here, so a flood of connections cannot exhaust the server that every tenant's session depends
// on (issue 13, finding 1). An unauthenticated connection holds at most a header and a Hello of
// helloLimit bytes (never the frame length it claims), for at most Config.HandshakeTimeout from
// its accept (an absolute deadline: trickling bytes does not extend it), and there are at most
// MaxPendingPerSource of them per source address and MaxPending in all; a connection over either
// limit is closed at once, before any goroutine or buffer is spent on it.

// helloLimit is the largest opening frame (Hello, LaneHello, a channel's Hello) read before
// authentication: a Hello is at most 4 + 4 + 4096 bytes (version, token), a LaneHello 304.
const helloLimit = 8 << 10

// Defaults of the pre-authentication limits.
const (
	DefaultMaxPendingPerSource = 16
	DefaultMaxPending          = 256
)

// handshakeGate counts connections that have not yet authenticated, per source and in all.
type handshakeGate struct {
	mu        sync.Mutex
	bySource  map[string]int
	total     int
	perSource int
	max       int
	shed      uint64 // connections closed unserved because a limit was reached
}

func newHandshakeGate(perSource, max int) *handshakeGate {
	return &handshakeGate{bySource: map[string]int{}, perSource: perSource, max: max}
}

// enter admits one more unauthenticated connection from source, if both limits allow.
func (g *handshakeGate) enter(source string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.total >= g.max || g.bySource[source] >= g.perSource {
		g.shed++
		return false
	}
	g.total++
	g.bySource[source]++
	return true
}

// leave ends one of source's unauthenticated connections: it authenticated, or it is gone.
func (g *handshakeGate) leave(source string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.bySource[source]--; g.bySource[source] <= 0 {
		delete(g.bySource, source)
	}
}

func (g *handshakeGate) stats() (pending int, shed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total, g.shed
}

// sourceOf is the address a connection's limits are counted by: its IP (every port of one
// address is one source; IPv6 peers by their /64, which one host usually has whole), or "local"
// for a Unix-socket peer.
func sourceOf(conn net.Conn) string {
	a, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "local"
	}
	if ip4 := a.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return a.IP.Mask(net.CIDRMask(64, 128)).String()
}

package worker

import (
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// seqpacketConns is a connected pair of seqpacket Unix sockets.
func seqpacketConns(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c.(*net.UnixConn)
	}
	return out[0], out[1]
}

// ledgerServer answers every memory request with "fits", as a server with room does.
func ledgerServer(c *net.UnixConn) {
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, _, err := DecodeMemoryRequest(buf[:n]); err != nil {
			return
		}
		c.Write(EncodeMemoryReply(true, 0))
	}
}

// What a worker holds on its server's books survives the server: frees made while no server
// runs fail to reach it but are tallied, reservations then are refused (never granted without a
// ledger), and the adopting server is told exactly what is held.
func TestServerLinkTalliesAcrossAServerLoss(t *testing.T) {
	here, there := seqpacketConns(t)
	go ledgerServer(there)
	link := newServerLink(io.Discard, nil, here)
	for _, d := range []int64{10 << 20, 6 << 20} {
		if ok, _, err := link.ledger(0, d); !ok || err != nil {
			t.Fatalf("reserve %d: %v %v", d, ok, err)
		}
	}
	ended := make(chan struct{})
	link.serverGone(time.Hour, func() { close(ended) }, slog.New(slog.DiscardHandler))
	there.Close()
	if ok, _, err := link.ledger(0, 1<<20); ok || err == nil {
		t.Fatalf("a reservation with no server: %v %v", ok, err)
	}
	if _, _, err := link.ledger(0, -4<<20); err == nil {
		t.Fatal("a give-back with no server reported success")
	}
	here2, there2 := seqpacketConns(t)
	go ledgerServer(there2)
	defer there2.Close()
	h, _ := link.attach(io.Discard, nil, here2, "s1", nil)
	if h.SessionID != "s1" || h.Pid != os.Getpid() || len(h.Memory) != 1 || h.Memory[0] != 12<<20 {
		t.Fatalf("adoption hello %+v, want 12 MiB on device 0", h)
	}
	if ok, _, err := link.ledger(0, 1<<20); !ok || err != nil {
		t.Fatalf("reserve on the adopting server: %v %v", ok, err)
	}
	select {
	case <-ended:
		t.Fatal("an adopted worker ended its session")
	default:
	}
}

// A worker no server adopts ends its session after the timeout; one adopted in time does not.
func TestServerLinkEndsWhenNotAdopted(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	link := newServerLink(io.Discard, nil, nil)
	ended := make(chan struct{})
	link.serverGone(50*time.Millisecond, func() { close(ended) }, log)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("an orphaned worker never ended its session")
	}

	link2 := newServerLink(io.Discard, nil, nil)
	ended2 := make(chan struct{})
	link2.serverGone(200*time.Millisecond, func() { close(ended2) }, log)
	link2.attach(io.Discard, nil, nil, "s2", nil)
	select {
	case <-ended2:
		t.Fatal("an adopted worker ended its session")
	case <-time.After(400 * time.Millisecond):
	}
}

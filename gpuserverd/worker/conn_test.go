package worker

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns a client connection and the server side as a blockingConn.
func pair(t *testing.T, stall time.Duration) (net.Conn, *blockingConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := srv.(*net.TCPConn).File()
	srv.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := syscall.Dup(int(f.Fd()))
	f.Close()
	bc, err := newBlockingConn(fd, stall)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	return client, bc
}

func TestBlockingConnStallsOnlyMidFrame(t *testing.T) {
	client, bc := pair(t, 50*time.Millisecond)
	// Between frames a quiet client is waited for past the stall limit.
	bc.SetReadDeadline(time.Time{})
	go func() { time.Sleep(200 * time.Millisecond); client.Write([]byte("hi")) }()
	buf := make([]byte, 2)
	if n, err := bc.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("idle read: %d %v", n, err)
	}
	// Mid-frame, a stall ends the read with a deadline error.
	bc.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := bc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled mid-frame read: %v", err)
	}
}

func TestBlockingConnCloseWakesReader(t *testing.T) {
	_, bc := pair(t, time.Minute)
	bc.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := bc.Read(make([]byte, 1)); done <- err }()
	time.Sleep(50 * time.Millisecond)
	bc.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the blocked read")
	}
}

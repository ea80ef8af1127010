package worker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
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

// A session on a blocking socket waits between frames as long as its guest is quiet, past the
// mid-frame stall limit: the wait for the next frame is not a stalled frame.
func TestSessionWaitsForAQuietGuestPastTheStallLimit(t *testing.T) {
	guest, bc := pair(t, 50*time.Millisecond)
	s := NewSession(Config{SessionID: "s1", Devices: []int{0}}, sim.New(1, 1<<20), bc, slog.Default())
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	c := &client{t: t, conn: guest, done: done}
	guest.SetDeadline(time.Now().Add(10 * time.Second))
	var hello wire.HelloReply
	c.read(&hello)
	var v wire.ValueReply
	c.call(&wire.DriverVersion{}, &v)
	time.Sleep(300 * time.Millisecond) // six stall limits without a frame
	c.call(&wire.DriverVersion{}, &v)
	if v.Result != 0 {
		t.Fatalf("the call after a quiet spell: %+v", v)
	}
}

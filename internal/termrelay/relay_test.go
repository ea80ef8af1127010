package termrelay

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// relay serves one WebSocket that Pipe joins to the console end of a net.Pipe (a stand-in for a
// serial console: the test plays the guest on the other end), and returns the user's client
// connection, the guest's end and the stats once the relay ends.
func relay(t *testing.T, lim Limits) (*websocket.Conn, net.Conn, <-chan Stats) {
	t.Helper()
	guest, console := net.Pipe()
	stats := make(chan Stats, 1)
	srv := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		stats <- Pipe(context.Background(), ws, console, lim)
	}))
	t.Cleanup(srv.Close)
	ws, err := websocket.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), "", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close(); guest.Close() })
	return ws, guest, stats
}

func waitStats(t *testing.T, ch <-chan Stats) Stats {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not end")
	}
	return Stats{}
}

func TestPipeCarriesBothWaysAndCounts(t *testing.T) {
	ws, guest, stats := relay(t, Limits{MaxFrame: 1024, Idle: time.Minute})
	if err := websocket.Message.Send(ws, "ls\r"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := io.ReadFull(guest, buf[:3])
	if err != nil || string(buf[:n]) != "ls\r" {
		t.Fatalf("guest read %q %v", buf[:n], err)
	}
	go guest.Write([]byte("bin etc\r\n"))
	var out []byte
	if err := websocket.Message.Receive(ws, &out); err != nil || string(out) != "bin etc\r\n" {
		t.Fatalf("user got %q %v", out, err)
	}
	guest.Close() // the VM went away
	s := waitStats(t, stats)
	if s.Reason != EndConsole || s.In != 3 || s.Out != 9 {
		t.Fatalf("stats %+v", s)
	}
	if err := websocket.Message.Receive(ws, &out); err == nil {
		t.Fatal("the user's connection outlived the console")
	}
}

func TestPipeEndsOnAnOversizedFrame(t *testing.T) {
	ws, guest, stats := relay(t, Limits{MaxFrame: 64, Idle: time.Minute})
	go io.Copy(io.Discard, guest)
	websocket.Message.Send(ws, strings.Repeat("x", 65))
	if s := waitStats(t, stats); s.Reason != EndFrame || s.In != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPipeEndsWhenIdleAndSaysWhy(t *testing.T) {
	ws, _, stats := relay(t, Limits{MaxFrame: 64, Idle: 200 * time.Millisecond, SayWhy: true})
	if s := waitStats(t, stats); s.Reason != EndIdle {
		t.Fatalf("stats %+v", s)
	}
	var bye Closing
	if err := websocket.JSON.Receive(ws, &bye); err != nil || bye.Closed != EndIdle {
		t.Fatalf("last frame: %+v %v", bye, err)
	}
}

func TestPipeEndsWhenTheUserLeaves(t *testing.T) {
	ws, guest, stats := relay(t, Limits{MaxFrame: 64, Idle: time.Minute})
	go io.Copy(io.Discard, guest)
	ws.Close()
	if s := waitStats(t, stats); s.Reason != EndUser {
		t.Fatalf("stats %+v", s)
	}
	if _, err := guest.Write([]byte("x")); err == nil {
		t.Fatal("the console stayed open after the user left")
	}
}

package server

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"gpucloud/gpuserverd/worker"
)

func TestArenaBudget(t *testing.T) {
	b := newArenaBudget(100)
	if ok, avail := b.set(1, 60); !ok || avail != 100 {
		t.Fatalf("first: %v %d", ok, avail)
	}
	if ok, avail := b.set(2, 50); ok || avail != 40 {
		t.Fatalf("over the total: %v %d", ok, avail)
	}
	if ok, _ := b.set(2, 40); !ok || b.inUse() != 100 {
		t.Fatalf("the rest: %v, in use %d", ok, b.inUse())
	}
	// A session changing its own holding counts only the others against it.
	if ok, avail := b.set(1, 60); !ok || avail != 60 {
		t.Fatalf("same again: %v %d", ok, avail)
	}
	b.drop(1)
	if b.inUse() != 40 {
		t.Fatalf("after drop: %d", b.inUse())
	}
	b.drop(1) // twice: nothing
	b.drop(2)
	if b.inUse() != 0 || len(b.held) != 0 {
		t.Fatalf("after both: %d %v", b.inUse(), b.held)
	}
}

// serveArenas over a real socket pair: requests answered in order, a malformed one ends the
// conversation, and the books are the server's.
func TestServeArenas(t *testing.T) {
	s := &Server{arenas: newArenaBudget(64 << 20)}
	here, there, err := seqpacketPair("arenas")
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	fc, err := net.FileConn(there)
	there.Close()
	if err != nil {
		t.Fatal(err)
	}
	w := fc.(*net.UnixConn)
	defer w.Close()
	done := make(chan struct{})
	go func() { defer close(done); s.serveArenas(here, 7, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	ask := func(n uint64) []byte {
		t.Helper()
		req := make([]byte, 8)
		req[0], req[1], req[2], req[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
		if _, err := w.Write(req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		k, err := w.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:k]
	}
	if got, want := ask(48<<20), worker.EncodeArenaReply(true, 64<<20); string(got) != string(want) {
		t.Fatalf("48 MiB: %x, want %x", got, want)
	}
	if s.arenas.inUse() != 48<<20 {
		t.Fatalf("in use %d", s.arenas.inUse())
	}
	if got, want := ask(80<<20), worker.EncodeArenaReply(false, 64<<20); string(got) != string(want) {
		t.Fatalf("80 MiB: %x, want %x", got, want)
	}
	if s.arenas.inUse() != 48<<20 {
		t.Fatalf("a refused request changed the books: %d", s.arenas.inUse())
	}
	w.Write([]byte{1, 2, 3})
	<-done
}

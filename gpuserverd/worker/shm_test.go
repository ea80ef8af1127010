package worker

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// unixSession serves a session over a real Unix socket pair, the worker's end a blockingConn as
// in a worker process, and returns the client's end.
func unixSession(t *testing.T, setup ...func(*Session)) (*client, *net.UnixConn, *Session) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := newBlockingConn(fds[1], time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	uc := fc.(*net.UnixConn)
	b := sim.New(1, 1<<30)
	s := NewSession(Config{Backend: "simulated", SessionID: "s-shm", Tier: "shared", Devices: []int{0}}, b, bc, slog.Default())
	for _, f := range setup {
		f(s)
	}
	c := &client{t: t, conn: uc, done: make(chan error, 1)}
	go func() { c.done <- s.Serve(context.Background()) }()
	t.Cleanup(func() { uc.Close() })
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	var hello wire.HelloReply
	c.read(&hello)
	return c, uc, s
}

// openArena sends ShmOpen and returns the reply and the mapped arena (nil when refused).
func openArena(t *testing.T, c *client, uc *net.UnixConn, bytes uint64) (wire.ShmOpenReply, []byte) {
	t.Helper()
	c.send(&wire.ShmOpen{Bytes: bytes}, 0)
	buf, oob := make([]byte, 2048), make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	h, err := wire.ParseHeader(buf[:wire.HeaderSize])
	if err != nil || h.Type != wire.TypeShmOpenReply || int(h.Length) != n-wire.HeaderSize {
		t.Fatalf("ShmOpen answered %+v (%v), %d bytes", h, err, n)
	}
	var r wire.ShmOpenReply
	if err := r.Decode(buf[wire.HeaderSize:n]); err != nil {
		t.Fatal(err)
	}
	if oobn == 0 {
		return r, nil
	}
	fd, err := oneFD(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	mem, err := unix.Mmap(fd, 0, int(r.Bytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return r, mem
}

// ringConn is the guest's side of the arena's rings: it writes ring 0 and reads ring 1.
type ringConn struct {
	net.Conn
	r, w *shmRing
}

func (c ringConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c ringConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func TestShmArenaCopies(t *testing.T) {
	c, uc, _ := unixSession(t)
	r, arena := openArena(t, c, uc, wire.ShmMin)
	if r.Result != 0 || arena == nil || len(arena) != wire.ShmMin {
		t.Fatalf("ShmOpen: %+v, %d bytes mapped", r, len(arena))
	}
	// From now on the frames go through the rings, as the guest library's do.
	c.conn = ringConn{Conn: uc, r: newShmRing(arena, 1, nil), w: newShmRing(arena, 0, nil)}
	mem := arena[wire.ShmCtl:]
	const base = wire.ShmCtl
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: 3 << 20}, &h)
	for i := range 3 << 20 {
		mem[i] = byte(i * 7)
	}
	var st wire.Status
	c.call(&wire.MemcpyHtoDShm{Dst: h.Handle, Offset: base, Bytes: 3 << 20}, &st)
	if st.Result != 0 {
		t.Fatalf("HtoD from the arena: %+v", st)
	}
	// Back into another part of the arena, asynchronously and without a reply (pinned memory),
	// then synchronise: the bytes are there.
	c.send(&wire.MemcpyDtoHShm{Src: h.Handle, Offset: base + 8<<20, Bytes: 3 << 20, Async: 1}, wire.FlagNoReply)
	c.call(&wire.Synchronize{}, &st)
	if st.Result != 0 || !bytes.Equal(mem[8<<20:11<<20], mem[:3<<20]) {
		t.Fatalf("DtoH into the arena: %+v, equal %v", st, bytes.Equal(mem[8<<20:11<<20], mem[:3<<20]))
	}
	// A range outside the arena is refused by name; the session goes on.
	c.call(&wire.MemcpyHtoDShm{Dst: h.Handle, Offset: wire.ShmMin - 10, Bytes: 11}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue || !strings.Contains(st.Message, "outside") {
		t.Fatalf("out-of-range copy: %+v", st)
	}
	c.call(&wire.MemcpyDtoHShm{Src: h.Handle, Offset: 4096, Bytes: 16}, &st) // the rings
	if backend.Result(st.Result) != backend.ErrInvalidValue || !strings.Contains(st.Message, "outside") {
		t.Fatalf("copy into the control rings: %+v", st)
	}
	c.call(&wire.MemcpyDtoHShm{Src: h.Handle, Offset: ^uint64(0), Bytes: 2}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("wrapping range: %+v", st)
	}
	// A second arena is refused; the first still works.
	var r2 wire.ShmOpenReply
	c.call(&wire.ShmOpen{Bytes: wire.ShmMin}, &r2)
	if backend.Result(r2.Result) != backend.ErrInvalidValue || !strings.Contains(r2.Message, "already open") {
		t.Fatalf("second ShmOpen: %+v", r2)
	}
	c.call(&wire.MemcpyDtoHShm{Src: h.Handle, Offset: base + 4<<20, Bytes: 1 << 20}, &st)
	if st.Result != 0 || !bytes.Equal(mem[4<<20:5<<20], mem[:1<<20]) {
		t.Fatalf("copy after refused ShmOpen: %+v", st)
	}
}

func TestShmOpenRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes uint64
		want  string
	}{
		{"too small", wire.ShmMin - 4096, "outside"},
		{"too large", wire.ShmMax + 4096, "outside"},
		{"zero", 0, "outside"},
		{"not whole pages", wire.ShmMin + 1, "page size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, uc, _ := unixSession(t)
			r, mem := openArena(t, c, uc, tc.bytes)
			if backend.Result(r.Result) != backend.ErrInvalidValue || mem != nil || !strings.Contains(r.Message, tc.want) {
				t.Fatalf("ShmOpen %d: %+v", tc.bytes, r)
			}
			var st wire.Status // the session goes on without shared memory
			c.call(&wire.MemcpyHtoDShm{Dst: 1, Offset: 0, Bytes: 1}, &st)
			if backend.Result(st.Result) != backend.ErrInvalidValue || !strings.Contains(st.Message, "before ShmOpen") {
				t.Fatalf("arena copy without an arena: %+v", st)
			}
		})
	}
	t.Run("not a unix socket", func(t *testing.T) {
		c := newSession(t, Config{Backend: "simulated", Tier: "shared", Devices: []int{0}})
		var r wire.ShmOpenReply
		c.call(&wire.ShmOpen{Bytes: wire.ShmMin}, &r)
		if backend.Result(r.Result) != backend.ErrNotSupported || !strings.Contains(r.Message, "Unix-socket") {
			t.Fatalf("ShmOpen over TCP-like conn: %+v", r)
		}
	})
	t.Run("without a reply", func(t *testing.T) {
		c, _, _ := unixSession(t)
		c.send(&wire.ShmOpen{Bytes: wire.ShmMin}, wire.FlagNoReply)
		var pe wire.ProtocolError
		c.read(&pe)
		if !strings.Contains(pe.Message, "ShmOpen cannot go without a reply") {
			t.Fatalf("protocol error %q", pe.Message)
		}
	})
}

// The arena is registered with the driver while the session has it, and unregistered at its end.
func TestShmArenaRegistered(t *testing.T) {
	c, uc, s := unixSession(t)
	r, arena := openArena(t, c, uc, wire.ShmMin)
	if r.Result != 0 {
		t.Fatalf("ShmOpen: %+v", r)
	}
	c.conn = ringConn{Conn: uc, r: newShmRing(arena, 1, nil), w: newShmRing(arena, 0, nil)}
	var st wire.Status
	c.call(&wire.Synchronize{}, &st) // the worker is between calls: its state may be read
	sc := s.devs[0].ctx.(*sim.Context)
	if n := sc.Registered(); n != 1 {
		t.Fatalf("%d ranges registered with the arena open, want 1", n)
	}
	uc.Close()
	if err := <-c.done; err != nil {
		t.Fatalf("session end: %v", err)
	}
	if n := sc.Registered(); n != 0 {
		t.Fatalf("%d ranges still registered after the session ended", n)
	}
}

// A ring carries a byte stream larger than itself intact: it wraps, the writer sleeps while it is
// full and the reader while it is empty, and a peer that has gone ends a sleeping reader.
func TestShmRingStream(t *testing.T) {
	mem := make([]byte, wire.ShmCtl)
	w, r := newShmRing(mem, 0, nil), newShmRing(mem, 0, nil)
	const total = 5<<20 + 12345
	src := make([]byte, total)
	for i := range src {
		src[i] = byte(i*131 + i>>16)
	}
	go func() {
		for off, step := 0, 1; off < total; step = step*7%300007 + 1 {
			n := min(step, total-off)
			w.Write(src[off : off+n])
			off += n
			if step%5 == 0 {
				time.Sleep(200 * time.Microsecond) // lets the reader run dry and sleep
			}
		}
	}()
	got := make([]byte, 0, total)
	buf := make([]byte, 70001)
	for len(got) < total {
		n, err := r.Read(buf[:min(len(buf), total-len(got))])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if len(got)%3 == 0 {
			time.Sleep(100 * time.Microsecond) // lets the writer fill the ring
		}
	}
	if !bytes.Equal(got, src) {
		t.Fatal("stream through the ring differs")
	}
	gone := newShmRing(mem, 1, func() error { return io.ErrUnexpectedEOF })
	if _, err := gone.Read(buf); err != io.ErrUnexpectedEOF {
		t.Fatalf("read with the peer gone: %v", err)
	}
}

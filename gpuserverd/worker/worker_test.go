package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// client speaks the wire protocol to a Session over an in-memory connection.
type client struct {
	t    *testing.T
	conn net.Conn
	req  uint32
	done chan error
}

func newSession(t *testing.T, cfg Config) *client {
	t.Helper()
	c, _ := startSession(t, cfg, false)
	return c
}

// startSession serves a new session over an in-memory connection, with lanes if asked (as a
// worker process with a lane socket has), and reads the handshake.
func startSession(t *testing.T, cfg Config, lanes bool) (*client, *Session) {
	t.Helper()
	a, b := net.Pipe()
	s := NewSession(cfg, sim.New(2, 1<<30), b, slog.Default())
	if lanes {
		s.EnableLanes()
	}
	c := &client{t: t, conn: a, done: make(chan error, 1)}
	go func() { c.done <- s.Serve(context.Background()) }()
	t.Cleanup(func() { a.Close() })
	a.SetDeadline(time.Now().Add(10 * time.Second))
	var hello wire.HelloReply
	c.read(&hello)
	if hello.DeviceCount != uint32(len(cfg.Devices)) || hello.Tier != cfg.Tier {
		t.Fatalf("hello %+v", hello)
	}
	return c, s
}

func (c *client) send(m wire.Message, flags uint16) {
	c.t.Helper()
	c.req++
	if _, err := c.conn.Write(wire.AppendFrame(nil, m, flags, c.req)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read(m wire.Message) wire.Header {
	c.t.Helper()
	h, p, err := wire.ReadFrame(c.conn, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if h.Type != m.Type() {
		c.t.Fatalf("got %s, want %s", h.Type, m.Type())
	}
	if err := m.Decode(p); err != nil {
		c.t.Fatal(err)
	}
	return h
}

func (c *client) call(m, reply wire.Message) {
	c.t.Helper()
	c.send(m, 0)
	if h := c.read(reply); h.Request != c.req {
		c.t.Fatalf("reply to request %d, want %d", h.Request, c.req)
	}
}

func TestQuotaAndMemInfo(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 10 << 20, Devices: []int{0}})
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: 8 << 20}, &h)
	first := h.Handle
	if h.Result != 0 {
		t.Fatalf("alloc under quota: %d", h.Result)
	}
	c.call(&wire.MemAlloc{Bytes: 4 << 20}, &h)
	if backend.Result(h.Result) != backend.ErrOutOfMemory {
		t.Fatalf("alloc past quota: %d", h.Result)
	}
	var mi wire.MemGetInfoReply
	c.call(&wire.MemGetInfo{}, &mi)
	if mi.Total != 10<<20 || mi.Free != 2<<20 {
		t.Fatalf("meminfo under quota: %+v", mi)
	}
	var st wire.Status
	c.call(&wire.MemFree{Ptr: first}, &st)
	c.call(&wire.MemAlloc{Bytes: 10 << 20}, &h)
	if h.Result != 0 {
		t.Fatalf("alloc after free: %d", h.Result)
	}
}

// An error of a call sent without a reply surfaces at the next synchronising call, once.
func TestAsyncErrorSurfacesAtSync(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	c.send(&wire.Memset{Dst: 0x1234, Value: 1, ElemSize: 4, Count: 4, Async: 1}, wire.FlagNoReply)
	c.send(&wire.EventRecord{Event: 999}, wire.FlagNoReply)
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue || !strings.Contains(st.Message, "asynchronous Memset") {
		t.Fatalf("sync after a bad async memset: %+v", st)
	}
	c.call(&wire.Synchronize{}, &st)
	if st.Result != 0 {
		t.Fatalf("second sync: %+v", st)
	}
}

// Each granted GPU is its own context, selected with SetDevice; an ungranted one is refused.
func TestDevicesAreTheGrantedOnes(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{1}})
	var di wire.DeviceInfoReply
	c.call(&wire.DeviceInfo{Ordinal: 0}, &di)
	if di.Result != 0 || len(di.UUID) != 16 || di.PCIBusID != "00000000:11:00.0" {
		t.Fatalf("device 0 of the session is backend device 1: %+v", di)
	}
	c.call(&wire.DeviceInfo{Ordinal: 1}, &di)
	if backend.Result(di.Result) != backend.ErrInvalidDevice {
		t.Fatalf("ungranted device: %+v", di)
	}
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: 64}, &h)
	if h.Handle>>40 != (0x7f2c_0000_0000+0x0100_0000_0000)>>40 {
		t.Fatalf("allocation %#x is not on backend device 1", h.Handle)
	}
	var st wire.Status
	c.call(&wire.SetDevice{Ordinal: 3}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidDevice || !strings.Contains(st.Message, "1 granted") {
		t.Fatalf("SetDevice past the grant: %+v", st)
	}
}

func TestChunkedCopies(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	n := wire.MaxChunk*2 + 100
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: uint64(n)}, &h)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for off := 0; off < n; off += wire.MaxChunk {
		end := min(n, off+wire.MaxChunk)
		flags := wire.FlagNoReply
		if end == n {
			flags = 0
		}
		c.send(&wire.MemcpyHtoD{Dst: h.Handle + uint64(off), Data: data[off:end]}, uint16(flags))
	}
	var st wire.Status
	c.read(&st)
	if st.Result != 0 {
		t.Fatalf("HtoD: %+v", st)
	}
	c.send(&wire.MemcpyDtoH{Src: h.Handle, Bytes: uint64(n)}, 0)
	var got []byte
	for frames := 0; ; frames++ {
		var d wire.MemcpyDtoHData
		hd := c.read(&d)
		got = append(got, d.Data...)
		if hd.Flags&wire.FlagMore == 0 {
			if frames != 2 || d.Result != 0 {
				t.Fatalf("DtoH ended after %d frames, result %d", frames+1, d.Result)
			}
			break
		}
	}
	if string(got) != string(data) {
		t.Fatal("data changed on the round trip")
	}
}

func TestMalformedFrameIsRefusedByName(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	frame := wire.AppendHeader(nil, wire.TypeMemAlloc, 0, 1, 3)
	c.conn.Write(append(frame, 1, 2, 3))
	var pe wire.ProtocolError
	c.read(&pe)
	if !strings.Contains(pe.Message, "MemAlloc.bytes: truncated") {
		t.Fatalf("protocol error %q", pe.Message)
	}
	c.checkClosed()
}

func TestMisusedFramesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		m     wire.Message
		flags uint16
		want  string
	}{
		{&wire.MemcpyDtoH{Src: 1, Bytes: 1}, wire.FlagNoReply, "MemcpyDtoH cannot go without a reply"},
		{&wire.Status{}, 0, "Status is not a request"},
		{&wire.Hello{Version: 1}, 0, "Hello after the handshake"},
		{&wire.MemcpyHtoDStriped{Dst: 1, Bytes: 5, Lanes: 1}, 0, "striped copy over 1 lanes, 0 opened"},
		{&wire.MemcpyDtoHStriped{Src: 1, Bytes: 5, Lanes: 0}, 0, "striped copy over 0 lanes"},
		{&wire.MemcpyHtoDStriped{Dst: 1, Bytes: 5, Lanes: 1}, wire.FlagNoReply, "MemcpyHtoDStriped cannot go without a reply"},
	} {
		c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
		c.send(tc.m, tc.flags)
		var pe wire.ProtocolError
		c.read(&pe)
		if !strings.Contains(pe.Message, tc.want) {
			t.Errorf("%s: protocol error %q, want %q", tc.m.Type(), pe.Message, tc.want)
		}
		c.checkClosed()
	}
}

func (c *client) checkClosed() {
	c.t.Helper()
	if err := <-c.done; !errors.Is(err, wire.ErrDecode) {
		c.t.Fatalf("session ended with %v", err)
	}
	if _, err := c.conn.Read(make([]byte, 1)); err != io.EOF {
		c.t.Fatalf("connection still open: %v", err)
	}
}

package worker

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

func newLaneSession(t *testing.T, cfg Config) (*client, *Session) {
	t.Helper()
	return startSession(t, cfg, true)
}

// attachLane attaches a lane over an in-memory connection and returns the guest's end and the
// worker's answer.
func attachLane(t *testing.T, s *Session, hello []byte) (net.Conn, wire.Status, error) {
	t.Helper()
	g, w := net.Pipe()
	g.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { g.Close() })
	errc := make(chan error, 1)
	go func() { errc <- s.Attach(w, hello) }()
	var st wire.Status
	h, p, err := wire.ReadFrame(g, nil)
	if err != nil || h.Type != wire.TypeStatus || st.Decode(p) != nil {
		t.Fatalf("lane answer: %v %v", h, err)
	}
	return g, st, <-errc
}

func laneHello(session string, key []byte, lane uint32) []byte {
	return (&wire.LaneHello{Version: wire.Version, SessionID: session, Key: key, Lane: lane}).Append(nil)
}

func openLanes(t *testing.T, c *client, s *Session, n uint32) []net.Conn {
	t.Helper()
	var lr wire.LanesOpenReply
	c.call(&wire.LanesOpen{Lanes: n}, &lr)
	if lr.Result != 0 || lr.Lanes != n || len(lr.Key) != 32 {
		t.Fatalf("LanesOpen: %+v", lr)
	}
	var conns []net.Conn
	for i := range n {
		g, st, err := attachLane(t, s, laneHello("s1", lr.Key, i))
		if err != nil || st.Result != 0 {
			t.Fatalf("lane %d: %+v %v", i, st, err)
		}
		conns = append(conns, g)
	}
	return conns
}

// A striped copy's pieces go round the lanes; data survives the round trip, the last piece short.
func TestStripedCopies(t *testing.T) {
	c, s := newLaneSession(t, Config{SessionID: "s1", Tier: "dedicated", Devices: []int{0}})
	lanes := openLanes(t, c, s, 3)
	n := 7*wire.StripeChunk + 123 // 8 pieces over 3 lanes: lanes carry 3, 3 and 2
	var h wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: uint64(n)}, &h)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>20)
	}
	for round := range 2 { // twice: the ring's slots are reused
		c.send(&wire.MemcpyHtoDStriped{Dst: h.Handle, Bytes: uint64(n), Lanes: 3}, 0)
		for i := 0; i*wire.StripeChunk < n; i++ {
			if _, err := lanes[i%3].Write(data[i*wire.StripeChunk : min(n, (i+1)*wire.StripeChunk)]); err != nil {
				t.Fatal(err)
			}
		}
		var st wire.Status
		c.read(&st)
		if st.Result != 0 {
			t.Fatalf("round %d: striped HtoD: %+v", round, st)
		}
		got := make([]byte, n)
		c.send(&wire.MemcpyDtoHStriped{Src: h.Handle, Bytes: uint64(n), Lanes: 3}, 0)
		errc := make(chan error, 3)
		for l := range 3 {
			go func() {
				for i := l; i*wire.StripeChunk < n; i += 3 {
					if _, err := io.ReadFull(lanes[l], got[i*wire.StripeChunk:min(n, (i+1)*wire.StripeChunk)]); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
		}
		for range 3 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		c.read(&st)
		if st.Result != 0 || !bytes.Equal(got, data) {
			t.Fatalf("round %d: striped DtoH: %+v, data equal %v", round, st, bytes.Equal(got, data))
		}
	}
	// A device error fails the copy, but every byte still travels, so the lanes stay in step.
	c.send(&wire.MemcpyDtoHStriped{Src: 0x10, Bytes: 2 * wire.StripeChunk, Lanes: 2}, 0)
	for l := range 2 {
		if _, err := io.ReadFull(lanes[l], make([]byte, wire.StripeChunk)); err != nil {
			t.Fatal(err)
		}
	}
	var st wire.Status
	c.read(&st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("striped DtoH from a bad address: %+v", st)
	}
	var mi wire.MemGetInfoReply
	c.call(&wire.MemGetInfo{}, &mi) // the session goes on
	if mi.Result != 0 {
		t.Fatalf("after a failed striped copy: %+v", mi)
	}
}

// Bad LanesOpen and LaneHello are refused with a reason and leave the session as it was.
func TestLaneRefusals(t *testing.T) {
	c, s := newLaneSession(t, Config{SessionID: "s1", Tier: "dedicated", Devices: []int{0}})
	var lr wire.LanesOpenReply
	for _, n := range []uint32{0, wire.MaxLanes + 1} {
		c.call(&wire.LanesOpen{Lanes: n}, &lr)
		if backend.Result(lr.Result) != backend.ErrInvalidValue || len(lr.Key) != 0 {
			t.Fatalf("LanesOpen{%d}: %+v", n, lr)
		}
	}
	if _, st, err := attachLane(t, s, laneHello("s1", make([]byte, 32), 0)); err == nil || backend.Result(st.Result) != backend.ErrNotPermitted {
		t.Fatalf("lane before LanesOpen: %+v %v", st, err)
	}
	c.call(&wire.LanesOpen{Lanes: 2}, &lr)
	old := lr.Key
	// A second LanesOpen (a guest that resumed after a cut) gets a new key; lanes of the old
	// one are closed and its key no longer attaches.
	g, st, err := attachLane(t, s, laneHello("s1", old, 0))
	if err != nil || st.Result != 0 {
		t.Fatalf("lane 0 with the first key: %+v %v", st, err)
	}
	c.call(&wire.LanesOpen{Lanes: 2}, &lr)
	key := lr.Key
	if lr.Result != 0 || len(key) != 32 || bytes.Equal(key, old) {
		t.Fatalf("second LanesOpen: %+v", lr)
	}
	if _, rerr := g.Read(make([]byte, 1)); rerr == nil {
		t.Fatal("the first key's lane stayed open after a second LanesOpen")
	}
	if _, st, err := attachLane(t, s, laneHello("s1", old, 1)); err == nil || backend.Result(st.Result) != backend.ErrNotPermitted {
		t.Fatalf("lane with the first key after a second LanesOpen: %+v %v", st, err)
	}
	bad := bytes.Clone(key)
	bad[0] ^= 1
	for _, tc := range []struct {
		name  string
		hello []byte
		code  backend.Result
		want  string
	}{
		{"wrong key", laneHello("s1", bad, 0), backend.ErrNotPermitted, "wrong session or key"},
		{"other session", laneHello("s2", key, 0), backend.ErrNotPermitted, "wrong session or key"},
		{"lane out of range", laneHello("s1", key, 2), backend.ErrInvalidValue, "lane 2 of 2 opened"},
		{"old version", (&wire.LaneHello{Version: 99, SessionID: "s1", Key: key}).Append(nil), backend.ErrNotSupported, "protocol version 99"},
		{"truncated", []byte{1, 0, 0, 0, 9}, backend.ErrUnknown, "LaneHello.session_id: truncated"},
		{"key too long", laneHello("s1", make([]byte, 33), 0), backend.ErrUnknown, "LaneHello.key: length 33 exceeds limit 32"},
	} {
		g, st, err := attachLane(t, s, tc.hello)
		if err == nil || backend.Result(st.Result) != tc.code || !strings.Contains(st.Message, tc.want) {
			t.Errorf("%s: %+v %v, want %d %q", tc.name, st, err, tc.code, tc.want)
		}
		if _, err := g.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: refused lane still open: %v", tc.name, err)
		}
	}
	if _, st, err := attachLane(t, s, laneHello("s1", key, 1)); err != nil || st.Result != 0 {
		t.Fatalf("good lane 1 after refusals: %+v %v", st, err)
	}
	if _, st, err := attachLane(t, s, laneHello("s1", key, 1)); err == nil || !strings.Contains(st.Message, "lane 1 already attached") {
		t.Fatalf("lane 1 twice: %+v %v", st, err)
	}
	// Lane 0 never attached: a striped copy over it cannot be placed, so the session ends.
	c.send(&wire.MemcpyHtoDStriped{Dst: 1, Bytes: 5, Lanes: 2}, 0)
	var pe wire.ProtocolError
	c.read(&pe)
	if !strings.Contains(pe.Message, "lane 0, which is not attached") {
		t.Fatalf("striped copy over a missing lane: %q", pe.Message)
	}
	c.checkClosed()
}

// Without a lane socket (an in-process session) lanes are not offered.
func TestLanesNeedALaneSocket(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{0}})
	var lr wire.LanesOpenReply
	c.call(&wire.LanesOpen{Lanes: 2}, &lr)
	if backend.Result(lr.Result) != backend.ErrNotSupported {
		t.Fatalf("LanesOpen without a lane socket: %+v", lr)
	}
}

// A lane that breaks mid-copy ends the session (the lanes are out of step) without hanging it.
func TestBrokenLaneEndsSession(t *testing.T) {
	for _, dtoh := range []bool{false, true} {
		c, s := newLaneSession(t, Config{SessionID: "s1", Tier: "dedicated", Devices: []int{0}})
		lanes := openLanes(t, c, s, 2)
		var h wire.HandleReply
		c.call(&wire.MemAlloc{Bytes: 8 * wire.StripeChunk}, &h)
		if dtoh {
			c.send(&wire.MemcpyDtoHStriped{Src: h.Handle, Bytes: 8 * wire.StripeChunk, Lanes: 2}, 0)
			io.ReadFull(lanes[0], make([]byte, wire.StripeChunk))
		} else {
			c.send(&wire.MemcpyHtoDStriped{Dst: h.Handle, Bytes: 8 * wire.StripeChunk, Lanes: 2}, 0)
			lanes[0].Write(make([]byte, wire.StripeChunk))
		}
		lanes[1].Close()
		select {
		case <-c.done: // a closed lane reads as the client gone: no error to report
			if _, err := c.conn.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("dtoh=%v: session's connection still open: %v", dtoh, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("dtoh=%v: session still serving after a lane broke", dtoh)
		}
	}
}

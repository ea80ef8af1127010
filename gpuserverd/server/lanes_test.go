package server

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// laneDial opens a TCP connection served by s.handle and sends frame on it.
func laneDial(t *testing.T, s *Server, frame []byte) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go s.handle(context.Background(), sc, func() {})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	return c
}

// lanePair is a lane socket pair (laneSocket), closed when the test ends.
func lanePair(t *testing.T) (here *net.UnixConn, there *os.File) {
	t.Helper()
	here, there, err := laneSocket()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { here.Close(); there.Close() })
	return here, there
}

func TestLaneHelloRefusals(t *testing.T) {
	s, _ := newServer(t)
	for _, tc := range []struct {
		name  string
		frame []byte
		code  backend.Result
		want  string
	}{
		{"unknown session", wire.AppendFrame(nil, &wire.LaneHello{Version: wire.Version, SessionID: "nope", Key: make([]byte, 32)}, 0, 0),
			backend.ErrNotPermitted, "lane refused: wrong session or key"},
		{"truncated", append(wire.AppendHeader(nil, wire.TypeLaneHello, 0, 0, 6), 1, 0, 0, 0, 9, 0),
			backend.ErrInvalidValue, "LaneHello.session_id: truncated"},
	} {
		c := laneDial(t, s, tc.frame)
		h, p, err := wire.ReadFrame(c, nil)
		var st wire.Status
		if err != nil || h.Type != wire.TypeStatus || st.Decode(p) != nil {
			t.Fatalf("%s: %v %v", tc.name, h, err)
		}
		if backend.Result(st.Result) != tc.code || !strings.Contains(st.Message, tc.want) {
			t.Errorf("%s: %+v, want %d %q", tc.name, st, tc.code, tc.want)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: refused lane left open", tc.name)
		}
	}
}

// A lane for a running session goes, descriptor and LaneHello, to that session's worker.
func TestLaneIsPassedToItsWorker(t *testing.T) {
	s, _ := newServer(t)
	here, there := lanePair(t)
	s.mu.Lock()
	s.sessions[1] = &session{claims: sessiontoken.Claims{SessionID: "other"}}
	s.sessions[2] = &session{claims: sessiontoken.Claims{SessionID: "s1"}, lanes: here}
	s.mu.Unlock()
	hello := &wire.LaneHello{Version: wire.Version, SessionID: "s1", Key: make([]byte, 32), Lane: 3}
	c := laneDial(t, s, wire.AppendFrame(nil, hello, 0, 0))

	wc, err := net.FileConn(there)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	wc.SetDeadline(time.Now().Add(5 * time.Second))
	buf, oob := make([]byte, 1024), make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := wc.(*net.UnixConn).ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.LaneHello
	if err := got.Decode(buf[:n]); err != nil || got.Lane != 3 || got.SessionID != "s1" {
		t.Fatalf("worker got %+v %v", got, err)
	}
	msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
	if len(msgs) != 1 {
		t.Fatalf("%d control messages", len(msgs))
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("descriptors %v %v", fds, err)
	}
	lane := os.NewFile(uintptr(fds[0]), "lane")
	defer lane.Close()
	// The descriptor is the guest's connection: what the worker writes, the guest reads.
	if _, err := lane.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "ok" {
		t.Fatalf("guest read %q %v", b, err)
	}
}

// Sessions sharing an id (an instance's several processes) each issue their own lane key: a lane
// goes to the worker that issued its key, also when that worker's report comes after the lane.
func TestLaneGoesToTheWorkerThatIssuedItsKey(t *testing.T) {
	s, _ := newServer(t)
	keys := [][]byte{make([]byte, 32), make([]byte, 32)}
	keys[1][0] = 1
	var theres []*os.File
	s.mu.Lock()
	for i := range 2 {
		here, there := lanePair(t)
		theres = append(theres, there)
		s.sessions[10+i] = &session{claims: sessiontoken.Claims{SessionID: "inst"}, lanes: here}
	}
	s.sessions[10].last = worker.Snapshot{LaneKey: worker.ResumeKeyOf(keys[0])}
	s.mu.Unlock()
	// The second worker reports its key a little after its guest's lane arrives.
	go func() {
		time.Sleep(40 * time.Millisecond)
		se := s.sessions[11]
		se.mu.Lock()
		se.last = worker.Snapshot{LaneKey: worker.ResumeKeyOf(keys[1])}
		se.mu.Unlock()
	}()
	for _, i := range []int{1, 0} {
		hello := &wire.LaneHello{Version: wire.Version, SessionID: "inst", Key: keys[i], Lane: uint32(i)}
		laneDial(t, s, wire.AppendFrame(nil, hello, 0, 0))
		wc, err := net.FileConn(theres[i])
		if err != nil {
			t.Fatal(err)
		}
		wc.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1024)
		n, _, _, _, err := wc.(*net.UnixConn).ReadMsgUnix(buf, make([]byte, syscall.CmsgSpace(4)))
		wc.Close()
		var got wire.LaneHello
		if err != nil || got.Decode(buf[:n]) != nil || got.Lane != uint32(i) {
			t.Fatalf("worker %d got %+v %v", i, got, err)
		}
	}
}

// A session that moved here may report its resume key only after its old server redirected the
// guest (the worker answers MigrateReady, then sends its snapshot): the guest's Resume, come
// first, waits for that report instead of going to another session of the instance, whose worker
// would refuse it and so end the guest's session. The report is made as the Resume begins to
// wait; without the wait the Resume goes to either session (the map's order), so each of the
// rounds would send it to the other one half the time.
func TestResumeWaitsForTheKeyOfASessionThatMovedHere(t *testing.T) {
	sibling, moved := make([]byte, 32), make([]byte, 32)
	sibling[0], moved[0] = 1, 2
	for round := range 10 {
		s, _ := newServer(t)
		sibHere, _ := lanePair(t)
		movedLanes, movedThere := lanePair(t)
		s.mu.Lock()
		s.sessions[10] = &session{claims: sessiontoken.Claims{SessionID: "inst"}, lanes: sibHere,
			last: worker.Snapshot{ResumeKey: worker.ResumeKeyOf(sibling)}}
		movedHere := &session{claims: sessiontoken.Claims{SessionID: "inst"}, lanes: movedLanes}
		s.sessions[11] = movedHere
		s.mu.Unlock()
		s.keyAwaited = func(string) { // the moved session's worker reports its key now
			movedHere.mu.Lock()
			movedHere.last = worker.Snapshot{ResumeKey: worker.ResumeKeyOf(moved)}
			movedHere.mu.Unlock()
		}
		laneDial(t, s, wire.AppendFrame(nil, &wire.Resume{Version: wire.Version, SessionID: "inst", Secret: moved}, 0, 0))

		wc, err := net.FileConn(movedThere)
		if err != nil {
			t.Fatal(err)
		}
		wc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _, _, _, err = wc.(*net.UnixConn).ReadMsgUnix(make([]byte, 1024), make([]byte, syscall.CmsgSpace(4)))
		wc.Close()
		if err != nil {
			t.Fatalf("round %d: the resume never reached the session that moved here (%v): its sibling got it", round, err)
		}
	}
}

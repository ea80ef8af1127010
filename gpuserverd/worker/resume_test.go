package worker

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// After a cut, the worker's stream goes on on the resumed connection: the guest gets exactly the
// bytes after the count it names (from the kept ring, wrapped past its end here), the write cut
// midway completes, and reads go on with what the guest sends on the new connection.
func TestResumeSplicesTheStream(t *testing.T) {
	guest, workerSide := tcpPair(t)
	rc := newResumeConn(workerSide, "s1")
	st := newStats()
	rc.observe(st.away, st.back)
	open := rc.open(60_000)
	sent := make([]byte, resumeKeep+(8<<20)) // more than the ring: it wraps
	for i := range sent {
		sent[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() { _, err := rc.Write(sent); wrote <- err }()
	const received = resumeKeep // what the guest says it received before the cut
	if _, err := io.CopyN(io.Discard, guest, 4096); err != nil {
		t.Fatal(err)
	}
	guest.(*net.TCPConn).SetLinger(0)
	guest.Close() // a reset: the worker's writes and reads fail and wait for a resume

	time.Sleep(100 * time.Millisecond)
	// While the guest is away its session is billed no further than the cut.
	if away := st.Snapshot().AwaySince; away.IsZero() || time.Since(away) > 10*time.Second {
		t.Fatalf("away since %v after the cut", away)
	}
	guest2, worker2 := tcpPair(t)
	m := wire.Resume{Version: wire.Version, SessionID: "s1", Secret: open.Secret, Received: received}
	if err := rc.offer(worker2, m.Append(nil)); err != nil {
		t.Fatal(err)
	}
	h, p, err := wire.ReadFrame(guest2, nil)
	if err != nil || h.Type != wire.TypeResumeReply {
		t.Fatalf("resume reply %v %v", h.Type, err)
	}
	var rr wire.ResumeReply
	if err := rr.Decode(p); err != nil || rr.Result != 0 || rr.Received != 0 {
		t.Fatalf("resume reply %+v %v", rr, err)
	}
	// The bytes the guest missed (a ring's worth less what it had), then the stream goes on.
	got := make([]byte, len(sent)-received)
	guest2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(guest2, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent[received:]) {
		t.Fatal("the resent bytes are not the stream's from the guest's count on")
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write across the cut: %v", err)
	}
	if away := st.Snapshot().AwaySince; !away.IsZero() {
		t.Fatalf("still away since %v after the guest resumed", away)
	}
	guest2.Write([]byte("hello"))
	b := make([]byte, 5)
	if _, err := io.ReadFull(rc, b); err != nil || string(b) != "hello" {
		t.Fatalf("the worker's read after the resume: %q %v", b, err)
	}
}

// A guest asking for bytes the ring no longer holds is refused, not sent a wrong stream.
func TestResumeRefusesBytesNoLongerKept(t *testing.T) {
	_, workerSide := tcpPair(t)
	rc := newResumeConn(workerSide, "s1")
	rc.open(60_000)
	rc.mu.Lock()
	rc.out = resumeKeep + 100 // as if that much had been sent
	rc.mu.Unlock()
	guest2, worker2 := tcpPair(t)
	err := rc.splice(resumeOffer{conn: worker2, m: wire.Resume{Received: 50}})
	if err == nil {
		t.Fatal("resumed from a byte the ring no longer holds")
	}
	h, p, err := wire.ReadFrame(guest2, nil)
	var rr wire.ResumeReply
	if err != nil || h.Type != wire.TypeResumeReply || rr.Decode(p) != nil || rr.Result == 0 {
		t.Fatalf("refusal %v %+v %v", h.Type, rr, err)
	}
}

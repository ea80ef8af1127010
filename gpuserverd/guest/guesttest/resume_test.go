package guesttest

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// cutter is a TCP proxy in front of gpuserverd that can cut every connection through it, with a
// reset on both sides, as a network failure would.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*net.TCPConn // guest side, server side, guest side, ...
	cuts  int
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln}
	t.Cleanup(func() { ln.Close(); c.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in.(*net.TCPConn), out.(*net.TCPConn))
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
			go func() { io.Copy(in, out); in.(*net.TCPConn).CloseWrite() }()
		}
	}()
	return c
}

// cut resets every connection through the proxy.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The server's sides first: a copier that sees its peer go half-closes the other side (an
	// orderly end, which is a guest leaving), so the resets must come before.
	for _, first := range []int{1, 0} {
		for i := first; i < len(c.conns); i += 2 {
			c.conns[i].SetLinger(0) // close with a reset
			c.conns[i].Close()
		}
	}
	c.conns = nil
	c.cuts++
}

// Issue 18 (b): the guest's connection is cut (reset) three times while its program runs; the
// guest library dials again, resumes the session, and the program finishes with correct results.
// One session, billed once: its records are contiguous and end when the program does.
func TestGuestResumesAcrossCutConnections(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, []string{"--checkpoint-period", "100ms"})
	px := newCutter(t, s.addr)
	prog := s.client(s.token("s-cut-conn", sessiontoken.TierShared, 64<<20), "steady", "60", "30")
	prog.Env = append(prog.Env, "GPUCLOUD_ENDPOINT="+px.ln.Addr().String(), "GPUCLOUD_LANES=0")
	var stderr bytes.Buffer
	out := startSteady(t, prog, &stderr)
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		px.cut()
	}
	rest, _ := io.ReadAll(out)
	err := prog.Wait()
	finished := time.Now()
	t.Logf("guest's stderr:\n%s", stderr.String())
	if err != nil || !strings.Contains(string(rest), "STEADY OK 60") {
		t.Fatalf("steady across cut connections: %v %q", err, rest)
	}
	if n := strings.Count(stderr.String(), "gpucloud: session resumed"); n < 2 {
		t.Fatalf("the session resumed %d times over 3 cuts", n)
	}
	waitFor(t, "the session's end", func() bool {
		return strings.Contains(s.get("/metrics"), "gpuserverd_sessions_active 0")
	})
	recs, billed := sessionRecords(t, s.usage(), "s-cut-conn")
	if len(recs) < 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range s.usage() {
		if r.SessionID != "s-cut-conn" {
			t.Fatalf("another session billed: %+v", r)
		}
	}
	first, last := recs[0], recs[len(recs)-1]
	if billed != last.End.Sub(first.Start) || last.End.After(finished.Add(time.Second)) {
		t.Fatalf("billed %v from %v to %v; the program finished at %v", billed, first.Start, last.End, finished)
	}
}

// A Resume is honoured only with the session's secret: a wrong one, for a live session or for
// none, gets one and the same refusal, and the live session goes on untouched.
func TestResumeWithoutTheSecretIsRefused(t *testing.T) {
	s := startServer(t)
	_, r, send := hold(t, s, s.token("s-victim", sessiontoken.TierShared, 64<<20), "8")
	var answers []wire.ResumeReply
	for _, sid := range []string{"s-victim", "s-nobody"} {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		m := &wire.Resume{Version: wire.Version, SessionID: sid, Secret: make([]byte, 32), Received: 0}
		if _, err := c.Write(wire.AppendFrame(nil, m, 0, 0)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var hb [wire.HeaderSize]byte
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			t.Fatalf("resume of %s: %v", sid, err)
		}
		h, err := wire.ParseHeader(hb[:])
		if err != nil || h.Type != wire.TypeResumeReply {
			t.Fatalf("resume of %s answered %v %v", sid, h.Type, err)
		}
		p := make([]byte, h.Length)
		io.ReadFull(c, p)
		var rr wire.ResumeReply
		if err := rr.Decode(p); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, rr)
		c.Close()
	}
	if answers[0].Result != 800 || answers[0] != answers[1] {
		t.Fatalf("refusals differ or let through: %+v", answers)
	}
	send("go\n")
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("the session after a stranger's resume: %q", line)
	}
}

// An instance's processes share its session id: when their connections are cut at once, each
// guest's Resume reaches its own worker (the server routes by the key of its secret), and both
// programs finish with correct results.
func TestGuestsSharingASessionIDResumeTheirOwn(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, nil)
	px := newCutter(t, s.addr)
	tok := s.token("s-shared-id", sessiontoken.TierShared, 64<<20)
	var outs []io.Reader
	var progs []*exec.Cmd
	var errs []*bytes.Buffer
	for range 2 {
		prog := s.client(tok, "steady", "40", "30")
		prog.Env = append(prog.Env, "GPUCLOUD_ENDPOINT="+px.ln.Addr().String(), "GPUCLOUD_LANES=0")
		var stderr bytes.Buffer
		outs = append(outs, startSteady(t, prog, &stderr))
		progs, errs = append(progs, prog), append(errs, &stderr)
	}
	time.Sleep(300 * time.Millisecond)
	px.cut()
	for i, prog := range progs {
		rest, _ := io.ReadAll(outs[i])
		if err := prog.Wait(); err != nil || !strings.Contains(string(rest), "STEADY OK 40") {
			t.Fatalf("guest %d across the cut: %v %q\n%s", i, err, rest, errs[i])
		}
		if !strings.Contains(errs[i].String(), "gpucloud: session resumed") {
			t.Fatalf("guest %d never resumed:\n%s", i, errs[i])
		}
	}
}

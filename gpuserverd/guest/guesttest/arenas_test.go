package guesttest

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holder is a guest holding a session open over shared memory (probe hold) until told to go on.
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

func (s *gpuserverd) hold(t *testing.T, session, mib string) *holder {
	t.Helper()
	h := &holder{cmd: s.client(s.token(session, "shared", 1<<30), "probe", "hold", "4")}
	h.cmd.Env = append(h.cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB="+mib)
	h.cmd.Stderr = &h.stderr
	h.stdin, _ = h.cmd.StdinPipe()
	stdout, _ := h.cmd.StdoutPipe()
	h.out = bufio.NewReader(stdout)
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cmd.Process.Kill(); h.cmd.Wait() })
	kill := time.AfterFunc(20*time.Second, func() { h.cmd.Process.Kill() })
	defer kill.Stop()
	if line, err := h.out.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("%s: probe hold: %q %v", session, line, err)
	}
	return h
}

// finish lets the probe go on and returns its last line and its stderr.
func (h *holder) finish(t *testing.T) (string, string) {
	t.Helper()
	h.stdin.Write([]byte("go\n"))
	line, _ := h.out.ReadString('\n')
	h.cmd.Wait()
	return line, h.stderr.String()
}

// arenaBytes is gpuserverd_arena_bytes from /metrics.
func (s *gpuserverd) arenaBytes() int64 {
	var n int64 = -1
	for _, l := range strings.Split(s.get("/metrics"), "\n") {
		if v, ok := strings.CutPrefix(l, "gpuserverd_arena_bytes "); ok {
			fmt.Sscan(v, &n)
		}
	}
	return n
}

// Arena limits, against a real gpuserverd (--shm-session-mib 32 --shm-total-mib 48): a request
// over the session's limit is told the limit and the guest takes it; one over what the server has
// left is cut to that; with nothing left the guest says why and works over the socket; the
// neighbours are untouched throughout, and a session's arena is the server's to give back
// however the session ends (a SIGKILLed worker included).
func TestArenaLimits(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, []string{"--shm-session-mib", "32", "--shm-total-mib", "48"})
	const mib = 1 << 20
	if !strings.Contains(s.get("/metrics"), fmt.Sprintf("gpuserverd_arena_limit_bytes %d", 48*mib)) {
		t.Fatalf("limit not in /metrics:\n%s", s.get("/metrics"))
	}
	a := s.hold(t, "arena-a", "64") // over the session's limit: takes 32
	waitFor(t, "A's 32 MiB held", func() bool { return s.arenaBytes() == 32*mib })
	pidA := s.workers()
	b := s.hold(t, "arena-b", "32") // 16 left: takes 16
	waitFor(t, "A's and B's 48 MiB held", func() bool { return s.arenaBytes() == 48*mib })
	var pidB int
	for _, p := range s.workers() {
		if !slices.Contains(pidA, p) {
			pidB = p
		}
	}

	// Nothing left: the guest is told why and runs the API suite over the socket.
	out := s.shmRun(t, s.token("arena-c", "shared", 1<<30), "16", "api_test")
	if !strings.Contains(out, "gpucloud: no shared memory (2): ShmOpen: 16777216 bytes: the arenas of this server's sessions may hold only 0 more") {
		t.Fatalf("C not told why:\n%s", tail(out))
	}
	if strings.Contains(out, "MemcpyHtoDShm") || !strings.Contains(out, "send MemcpyHtoD (") {
		t.Fatalf("C's copies did not fall back to the socket:\n%s", tail(out))
	}
	if got := s.arenaBytes(); got != 48*mib {
		t.Fatalf("after C, %d bytes held, want A's and B's %d", got, 48*mib)
	}

	// B's worker is killed: its 16 MiB come back, and a new session can have them.
	if err := syscall.Kill(pidB, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B's arena given back", func() bool { return s.arenaBytes() == 32*mib })
	out = s.shmRun(t, s.token("arena-d", "shared", 1<<30), "16", "shm_test")
	if !strings.Contains(out, "shared arena: 16777216 bytes") || !strings.Contains(out, "shm_test: ok") {
		t.Fatalf("D did not get the freed 16 MiB:\n%s", tail(out))
	}

	// A was untouched by all of it.
	line, stderr := a.finish(t)
	if line != "INTACT\n" {
		t.Fatalf("A after its neighbours: %q\n%s", line, stderr)
	}
	if !strings.Contains(stderr, "gpucloud: shared arena of 64 MiB refused (ShmOpen: 67108864 bytes over this server's arena limit per session, 33554432); taking 32 MiB") {
		t.Fatalf("A was not told of the limit:\n%s", stderr)
	}
	_, stderr = b.finish(t)
	if !strings.Contains(stderr, "gpucloud: shared arena of 32 MiB refused (ShmOpen: 33554432 bytes: the arenas of this server's sessions may hold only 16777216 more); taking 16 MiB") {
		t.Fatalf("B was not told of the total:\n%s", stderr)
	}
	waitFor(t, "every arena given back", func() bool { return s.arenaBytes() == 0 })
}

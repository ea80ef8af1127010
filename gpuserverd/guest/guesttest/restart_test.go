package guesttest

import (
	"crypto/ed25519"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/internal/sessiontoken"
)

// processGone reports whether pid has exited (a zombie counts: it runs no more).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// Issue 18 (a): gpuserverd SIGKILLed and restarted while a guest program runs. The program goes on
// with correct results (its worker holds its connection and outlives the server), the new server
// adopts the sessions, bills them on from the last record (contiguous records covering the whole
// session: no gap, nothing twice), and rebuilds the instance's memory ledger from what the
// adopted workers hold.
func TestGuestSurvivesServerKillAndRestart(t *testing.T) {
	survivesRestart(t, nil, (*gpuserverd).kill)
}

// The same across an upgrade: gpuserverd stopped (SIGTERM) with --keep-sessions-on-stop leaves
// its sessions running for the next one.
func TestGuestSurvivesServerUpgrade(t *testing.T) {
	survivesRestart(t, []string{"--keep-sessions-on-stop"}, func(s *gpuserverd) {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if st, err := s.cmd.Process.Wait(); err != nil || !st.Success() {
			t.Fatalf("gpuserverd's stop: %v %v", st, err)
		}
	})
}

func survivesRestart(t *testing.T, extra []string, stop func(*gpuserverd)) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	data := t.TempDir()
	flags := append([]string{"--checkpoint-period", "100ms"}, extra...)
	s := startServerOn(t, data, pub, priv, flags)

	// The instance inst-q holds 32 MiB of its 48 MiB quota in one session.
	sameInstance := func(c *sessiontoken.Claims) { c.InstanceID = "inst-q" }
	_, holdOut, send := hold(t, s, s.token("s-holder", sessiontoken.TierShared, 48<<20, sameInstance), "32")

	prog := s.client(s.token("s-steady", sessiontoken.TierShared, 64<<20), "steady", "80", "40")
	out := startSteady(t, prog, &testWriter{t: t})
	running := time.Now()
	waitFor(t, "the running session billed", func() bool {
		_, d := sessionRecords(t, s.usage(), "s-steady")
		return d >= 200*time.Millisecond
	})
	workers := s.workers()
	if len(workers) != 2 {
		t.Fatalf("workers %v", workers)
	}
	stop(s)
	time.Sleep(300 * time.Millisecond) // no server at all for a while; the program goes on
	for _, pid := range workers {
		if processGone(pid) {
			t.Fatalf("worker %d died with gpuserverd", pid)
		}
	}

	s2 := startServerOn(t, data, pub, priv, flags)
	if m := s2.get("/metrics"); !strings.Contains(m, "gpuserverd_sessions_adopted_total 2") ||
		!strings.Contains(m, "gpuserverd_sessions_active 2") || !strings.Contains(m, "gpuserverd_sessions_cut_total 0") {
		t.Fatalf("metrics after restart:\n%s", m)
	}
	// The ledger was rebuilt: another session of inst-q gets only the 16 MiB left.
	if got := s2.run(s2.token("s-second", sessiontoken.TierShared, 48<<20, sameInstance), "probe", "quota", "8"); !strings.Contains(got, "BLOCKS 2 CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("second session of the instance after the restart: %q", got)
	}

	rest, _ := io.ReadAll(out)
	if err := prog.Wait(); err != nil || !strings.Contains(string(rest), "STEADY OK 80") {
		t.Fatalf("steady across the restart: %v %q", err, rest)
	}
	finished := time.Now()
	send("go\n")
	if line, _ := holdOut.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("held memory across the restart: %q", line)
	}

	waitFor(t, "the adopted sessions' final records", func() bool {
		return !strings.Contains(s2.get("/metrics"), "gpuserverd_sessions_active 1") &&
			strings.Contains(s2.get("/metrics"), "gpuserverd_sessions_active 0")
	})
	recs, billed := sessionRecords(t, s2.usage(), "s-steady") // contiguous: no gap, no overlap
	if len(recs) < 3 {
		t.Fatalf("%d records", len(recs))
	}
	first, last := recs[0], recs[len(recs)-1]
	if billed != last.End.Sub(first.Start) || first.Start.After(running) || last.End.Before(finished.Add(-time.Second)) {
		t.Fatalf("steady billed %v from %v to %v; it ran from before %v to about %v", billed, first.Start, last.End, running, finished)
	}
	if last.MemoryPeakBytes != 3*(2<<20) {
		t.Fatalf("peak memory after adoption %d, want %d", last.MemoryPeakBytes, 3*(2<<20))
	}
}

// A worker whose gpuserverd has gone, and which no new one adopts within --adopt-timeout, ends
// its session: nothing runs unmetered for long.
func TestUnadoptedWorkerEndsItsSession(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, []string{"--adopt-timeout", "500ms"})
	cmd, r, send := hold(t, s, s.token("s-orphan", sessiontoken.TierDedicated, 0), "8")
	workers := s.workers()
	if len(workers) != 1 {
		t.Fatalf("workers %v", workers)
	}
	s.kill()
	start := time.Now()
	waitFor(t, "the orphaned worker to end", func() bool { return processGone(workers[0]) })
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("the worker ended %v after its server, before its adopt timeout", d)
	}
	send("go\n")
	line, _ := r.ReadString('\n')
	cmd.Wait()
	if !strings.HasPrefix(line, "LOST") {
		t.Fatalf("client of the ended session: %q", line)
	}
}

// startSteady starts a "steady" program (stderr to errs) and returns its stdout once it runs.
func startSteady(t *testing.T, prog *exec.Cmd, errs io.Writer) io.Reader {
	t.Helper()
	out, err := prog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	prog.Stderr = errs
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Process.Kill(); prog.Wait() })
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.HasPrefix(string(buf[:n]), "STEADY RUNNING") {
		t.Fatalf("steady: %q", buf[:n])
	}
	return out
}

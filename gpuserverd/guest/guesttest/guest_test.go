package guesttest

import (
	"bufio"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

// TestAPIFamilies runs the C program that exercises every forwarded API family, with large
// copies striped over lanes (the default, 4) and over the session's one connection.
func TestAPIFamilies(t *testing.T) {
	for _, lanes := range []string{"", "1", "8"} {
		t.Run("lanes="+lanes, func(t *testing.T) {
			s := startServer(t)
			cmd := s.client(s.token("s-api", sessiontoken.TierDedicated, 0), "api_test")
			cmd.Env = append(cmd.Env, "GPUCLOUD_DEBUG=1", "GPUCLOUD_LANES="+lanes)
			b, err := cmd.CombinedOutput()
			out := string(b)
			if err != nil || !strings.Contains(out, "api_test: OK") {
				t.Fatalf("api_test: %v\n%s", err, out)
			}
			want := map[string]string{"": "gpucloud: 4 lanes open", "8": "gpucloud: 8 lanes open"}[lanes]
			if got := strings.Contains(out, "lanes open"); got != (want != "") || !strings.Contains(out, want) {
				t.Fatalf("GPUCLOUD_LANES=%q: want %q in:\n%s", lanes, want, out)
			}
			// The server's reason for a refused call reaches the guest.
			if !strings.Contains(out, "gpucloud: MemFree failed (1): free of 0x") {
				t.Fatalf("no reason for the double free in:\n%s", out)
			}
			var recs = s.usage()
			waitFor(t, "usage record", func() bool { recs = s.usage(); return len(recs) == 1 })
			r := recs[0]
			if r.SessionID != "s-api" || r.TenantID != "tenant-s-api" || r.Tier != "dedicated" ||
				r.GPUModel != "Simulated GPU (test double)" || r.BytesMoved < 20<<20 || r.MemoryPeakBytes < 20<<20 ||
				!r.End.After(r.Start) || r.ID != serverID+"/s-api/1" {
				t.Fatalf("usage record %+v", r)
			}
		})
	}
}

// A token granting two GPUs gives the guest two devices, each with its own contexts and memory.
func TestTwoGPUs(t *testing.T) {
	s := startServer(t, "GPUSERVERD_SIM_DEVICES=2")
	tok := s.token("s-two", sessiontoken.TierDedicated, 0, func(c *sessiontoken.Claims) {
		c.GPUs = []string{sim.UUID(0), sim.UUID(1)}
	})
	if out := s.run(tok, "multigpu_test"); !strings.Contains(out, "multigpu_test: OK") {
		t.Fatalf("multigpu_test:\n%s", out)
	}
}

// Threads share the library's one connection.
func TestThreads(t *testing.T) {
	s := startServer(t)
	if out := s.run(s.token("s-threads", sessiontoken.TierDedicated, 0), "threads_test"); !strings.Contains(out, "threads_test: OK") {
		t.Fatalf("threads_test:\n%s", out)
	}
}

// A launch queued without a following call still leaves, from the flusher, over TCP and over
// shared memory.
func TestQueuedCallsLeaveAlone(t *testing.T) {
	s := startServer(t)
	if out := s.run(s.token("s-flush", sessiontoken.TierShared, 1<<30), "flush_test"); !strings.Contains(out, "flush_test: OK") {
		t.Fatalf("flush_test over TCP:\n%s", out)
	}
	if out := s.shmRun(t, s.token("s-flush-shm", sessiontoken.TierShared, 1<<30), "16", "flush_test"); !strings.Contains(out, "flush_test: OK") {
		t.Fatalf("flush_test over shared memory:\n%s", tail(out))
	}
}

// CU_STREAM_PER_THREAD and the _ptsz calls' NULL stream are each thread's own stream.
func TestPerThreadDefaultStreams(t *testing.T) {
	s := startServer(t)
	if out := s.run(s.token("s-ptds", sessiontoken.TierDedicated, 0), "ptds_test"); !strings.Contains(out, "ptds_test: OK") {
		t.Fatalf("ptds_test:\n%s", out)
	}
}

// The endpoint and token may come from the config file instead of the environment.
func TestConfigFile(t *testing.T) {
	s := startServer(t)
	conf := filepath.Join(t.TempDir(), "guest.conf")
	os.WriteFile(conf, []byte("# written by hostd\nendpoint = 127.0.0.1:1, "+s.addr+"\ntoken="+
		s.token("s-conf", sessiontoken.TierDedicated, 0)+"\n"), 0o600)
	cmd := s.client("", "probe", "init")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=", "GPUCLOUD_CONFIG="+conf)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "INIT 0 CUDA_SUCCESS") {
		t.Fatalf("with the config file (first endpoint unreachable): %q", out)
	}
	cmd = s.client("", "probe", "init")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=", "GPUCLOUD_CONFIG=/nonexistent")
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "INIT 100") || !strings.Contains(string(out), "no endpoint or token") {
		t.Fatalf("without any configuration: %q", out)
	}
}

func TestProcAddressFindsEveryExport(t *testing.T) {
	s := startServer(t)
	dir := buildAll(t)
	nm, err := exec.Command("nm", "-D", "--defined-only", dir+"/libcuda.so.1").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(nm), "\n") {
		if f := strings.Fields(line); len(f) == 3 && (f[1] == "T" || f[1] == "W") { // W: generated entry points
			names = append(names, f[2])
		}
	}
	if len(names) < 707 {
		t.Fatalf("only %d exported functions", len(names))
	}
	cmd := s.client("unused", "procaddr_test")
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "procaddr_test: OK") {
		t.Fatalf("procaddr_test: %v\n%s", err, out)
	}
}

func TestRefusedTokens(t *testing.T) {
	s := startServer(t)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	forger := *s
	forger.priv = otherKey // same claims, signed by a key the server does not trust
	cases := []struct {
		name, token, want, log string
	}{
		{"forged", forger.token("s-forged", sessiontoken.TierShared, 1<<20), "INIT 800", "bad token signature"},
		{"expired", s.token("s-old", sessiontoken.TierShared, 1<<20, func(c *sessiontoken.Claims) {
			c.IssuedAt -= 7200
			c.ExpiresAt = c.IssuedAt + 60
		}), "INIT 800", "token expired"},
		{"other server", s.token("s-foreign", sessiontoken.TierShared, 1<<20, func(c *sessiontoken.Claims) {
			c.GPUServer = "gs-elsewhere"
		}), "INIT 800", "another GPU server"},
		{"unknown gpu", s.token("s-gpu", sessiontoken.TierShared, 1<<20, func(c *sessiontoken.Claims) {
			c.GPUs = []string{"GPU-deadbeef"}
		}), "INIT 100", "does not have"},
		{"garbage", "not-a-token", "INIT 800", "malformed token"},
	}
	for _, tc := range cases {
		out := s.run(tc.token, "probe", "init")
		if !strings.Contains(out, tc.want) || !strings.Contains(out, tc.log) {
			t.Errorf("%s: got %q, want %q and the reason %q", tc.name, out, tc.want, tc.log)
		}
	}
	if m := s.get("/metrics"); !strings.Contains(m, `gpuserverd_sessions_refused_total{reason="token"} 4`) ||
		len(s.workers()) != 0 {
		t.Fatalf("refusals not counted or a worker was started:\n%s", m)
	}
}

// hold starts a probe holding memory and waits until it has it.
func hold(t *testing.T, s *gpuserverd, token string, mib string) (*exec.Cmd, *bufio.Reader, func(string)) {
	t.Helper()
	cmd := s.client(token, "probe", "hold", mib)
	r, line, send := startHold(t, cmd)
	if !strings.HasPrefix(line, "HELD 7f") {
		t.Fatalf("probe hold: %q", line)
	}
	heldAt = strings.TrimSpace(strings.TrimPrefix(line, "HELD "))
	return cmd, r, send
}

// startHold starts a "probe hold" command and returns its output once it holds its memory, with
// its first line and a function that writes to its input.
func startHold(t *testing.T, cmd *exec.Cmd) (*bufio.Reader, string, func(string)) {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("probe hold: %q %v", line, err)
	}
	return r, line, func(s string) { stdin.Write([]byte(s)) }
}

// heldAt is the device address of the last probe hold's memory.
var heldAt string

func TestDedicatedTierAdmitsOneSession(t *testing.T) {
	s := startServer(t)
	_, r, send := hold(t, s, s.token("s-first", sessiontoken.TierDedicated, 0), "8")
	if out := s.run(s.token("s-second", sessiontoken.TierDedicated, 0), "probe", "init"); !strings.Contains(out, "INIT 46") ||
		!strings.Contains(out, "in use by another session") {
		t.Fatalf("second dedicated session: %q", out)
	}
	if out := s.run(s.token("s-shared", sessiontoken.TierShared, 1<<20), "probe", "init"); !strings.Contains(out, "INIT 46") {
		t.Fatalf("shared session on a dedicated GPU: %q", out)
	}
	send("go\n")
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("first session after refusals: %q", line)
	}
}

func TestSharedQuotaIsPerSession(t *testing.T) {
	s := startServer(t)
	// A neighbour holds 8 MiB on the same GPU under its own quota.
	_, r, send := hold(t, s, s.token("s-neighbour", sessiontoken.TierShared, 16<<20), "8")
	out := s.run(s.token("s-greedy", sessiontoken.TierShared, 40<<20), "probe", "quota", "8")
	if !strings.Contains(out, "BLOCKS 5 CUDA_ERROR_OUT_OF_MEMORY total 41943040") {
		t.Fatalf("greedy session: %q", out)
	}
	// The neighbour's device address means nothing in another session: no read of its data.
	if out := s.run(s.token("s-peeker", sessiontoken.TierShared, 16<<20), "probe", "peek", heldAt); !strings.Contains(out, "PEEK 1 CUDA_ERROR_INVALID_VALUE 0") {
		t.Fatalf("another tenant reading the neighbour's address %s: %q", heldAt, out)
	}
	send("go\n")
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("neighbour after the other's out-of-memory: %q", line)
	}
	// Each session is billed to its own tenant, for its own memory.
	var recs []api.UsageRecord
	waitFor(t, "three usage records", func() bool { recs = s.usage(); return len(recs) == 3 })
	for _, rec := range recs {
		want := map[string]uint64{"s-neighbour": 8 << 20, "s-greedy": 40 << 20, "s-peeker": 0}[rec.SessionID]
		if rec.TenantID != "tenant-"+rec.SessionID || rec.MemoryPeakBytes != want || rec.Tier != "shared" {
			t.Errorf("usage record %+v: want tenant-%s, peak %d", rec, rec.SessionID, want)
		}
	}
}

func TestKilledWorkerFreesAndServerGoesOn(t *testing.T) {
	s := startServer(t)
	cmd, r, send := hold(t, s, s.token("s-doomed", sessiontoken.TierDedicated, 0), "32")
	var pids []int
	waitFor(t, "one worker", func() bool { pids = s.workers(); return len(pids) == 1 })
	waitFor(t, "memory in metrics", func() bool {
		return strings.Contains(s.get("/metrics"), "gpuserverd_session_memory_bytes 33554432")
	})
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	send("go\n")
	line, _ := r.ReadString('\n')
	after, _ := r.ReadString('\n')
	if err := cmd.Wait(); err != nil || !strings.HasPrefix(line, "LOST 999") || after != "AFTER 999 999\n" {
		t.Fatalf("client of a killed worker: %v %q %q", err, line, after)
	}
	waitFor(t, "session cleared", func() bool {
		m := s.get("/metrics")
		return strings.Contains(m, "gpuserverd_sessions_active 0") && strings.Contains(m, "gpuserverd_session_memory_bytes 0")
	})
	recs := s.usage()
	if len(recs) != 1 || recs[0].SessionID != "s-doomed" || recs[0].MemoryPeakBytes != 32<<20 {
		t.Fatalf("usage after kill: %+v", recs)
	}
	// The GPU is free again: a new dedicated session is admitted and works.
	out := s.run(s.token("s-next", sessiontoken.TierDedicated, 64<<20), "probe", "quota", "16")
	if !strings.Contains(out, "BLOCKS 4 CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("next session on the freed GPU: %q", out)
	}
	waitFor(t, "second record", func() bool { return len(s.usage()) == 2 })
}

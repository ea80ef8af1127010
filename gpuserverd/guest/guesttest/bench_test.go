package guesttest

import (
	"os"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestLoopbackFigures prints the guest library's CPU-side figures over loopback against the
// simulated backend when GPUCLOUD_BENCH=1 (it measures, never asserts speed).
func TestLoopbackFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	s := startServer(t)
	t.Logf("TCP:\n%s", s.run(s.token("s-bench", sessiontoken.TierDedicated, 0), "bench"))
	waitFor(t, "the first session's end", func() bool { return len(s.usage()) == 1 }) // dedicated: one at a time
	cmd := s.client(s.token("s-bench-shm", sessiontoken.TierDedicated, 0), "bench")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB=256")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench over shared memory: %v\n%s", err, out)
	}
	t.Logf("shared memory (256 MiB arena):\n%s", out)
}

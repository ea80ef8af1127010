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
	t.Logf("\n%s", s.run(s.token("s-bench", sessiontoken.TierDedicated, 0), "bench"))
}

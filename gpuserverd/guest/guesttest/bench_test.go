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

// TestSharedMemoryFigures prints the same figures over the two same-host transports when
// GPUCLOUD_BENCH=1: a process's memfd arena with futex doorbells (unix:) and a VM's ivshmem
// channel file with polling doorbells (ivshmem:), both 256 MiB.
func TestSharedMemoryFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	s, dir := startIvshmemServer(t)
	path := channelFileOf(t, dir, "inst-bench", 256<<20)
	waitFree(t, path, 0)
	tok := s.token("bench", sessiontoken.TierDedicated, 0)
	for i, ep := range []string{"unix:" + s.sock, "ivshmem:" + path} {
		cmd := s.client(tok, "bench")
		cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT="+ep, "GPUCLOUD_SHM_MIB=256")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bench over %s: %v\n%s", ep, err, out)
		}
		t.Logf("%s\n%s", ep, out)
		waitFor(t, "the session's end", func() bool { return len(s.usage()) == i+1 })
	}
}

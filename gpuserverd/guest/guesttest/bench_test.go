package guesttest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

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

// TestSharedMemoryFigures prints the same figures over the two same-host transports when
// GPUCLOUD_BENCH=1: a process's memfd arena with futex doorbells (unix:) and a VM's ivshmem
// channel file with polling doorbells (ivshmem:), both 256 MiB.
func TestSharedMemoryFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	s, dir := startIvshmemServerIn(t, tmpfsDir(t))
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

// TestIdleWorkerCPU prints the CPU time a worker spends while its guest sits idle between calls
// for 3 s, over a futex doorbell (unix:) and a polling one (ivshmem:), when GPUCLOUD_BENCH=1.
func TestIdleWorkerCPU(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-idle")
	waitFree(t, path, 0)
	tok := s.token("idle", sessiontoken.TierShared, 1<<30)
	for i, ep := range []string{"unix:" + s.sock, "ivshmem:" + path} {
		cmd := s.client(tok, "probe", "hold", "1")
		cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT="+ep, "GPUCLOUD_SHM_MIB=16")
		_, _, send := startHold(t, cmd)
		var pids []int
		waitFor(t, "one worker", func() bool { pids = s.workers(); return len(pids) == 1 })
		time.Sleep(500 * time.Millisecond) // past the spin and the first naps
		before := cpuTicks(t, pids[0])
		time.Sleep(3 * time.Second)
		used := cpuTicks(t, pids[0]) - before
		t.Logf("%-8s worker CPU while its guest idles: %d ticks of 10 ms in 3 s (%.1f%% of a core)",
			strings.SplitN(ep, ":", 2)[0], used, float64(used)/3)
		send("go\n")
		cmd.Wait()
		waitFor(t, "the session's end", func() bool { return len(s.usage()) == i+1 })
		waitFree(t, path, 0)
	}
}

// cpuTicks is a process's user+system time in clock ticks, all threads.
func cpuTicks(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var u, s int
	fmt.Sscan(f[11], &u)
	fmt.Sscan(f[12], &s)
	return u + s
}

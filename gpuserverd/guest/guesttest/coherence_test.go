package guesttest

import (
	"os"
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// Over TCP, managed and mapped host memory are device memory kept coherent with the program's
// pages by the guest library: several allocations, a CPU read that waits for a running kernel,
// copies naming managed memory, the program's own SIGSEGV handler still reached, frees that unmap,
// bad sizes refused with the quota intact (tests/coherence_test.c).
func TestCoherenceOverTCP(t *testing.T) {
	s := startServer(t)
	out := s.run(s.token("coherence", sessiontoken.TierShared, 1<<30), "coherence_test")
	if !strings.Contains(out, "coherence_test: OK") {
		t.Fatalf("coherence_test over TCP:\n%s", out)
	}
}

// TestCoherenceFigures prints the cost of a simple managed-memory loop against the same loop with
// explicit copies, over TCP (software coherence) and over shared memory (the arena), against the
// simulated backend, when GPUCLOUD_BENCH=1 (tests/coherence_bench.c; measures, never asserts).
func TestCoherenceFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	s := startServer(t)
	cmd := s.client(s.token("s-coh-bench", sessiontoken.TierShared, 1<<30), "coherence_bench")
	cmd.Env = append(cmd.Env, "GPUCLOUD_COHERENCE_STATS=1")
	tcp, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coherence_bench over TCP: %v\n%s", err, tcp)
	}
	t.Logf("TCP (loopback):\n%s", tcp)
	out := s.shmRun(t, s.token("s-coh-bench-shm", sessiontoken.TierShared, 1<<30), "256", "coherence_bench")
	t.Logf("shared memory (256 MiB arena):\n%s", out)
}

// Over a VM's ivshmem channel the arena, mapped a second time at its device address, serves
// managed memory as over unix: (one copy, no software coherence).
func TestManagedMemoryIvshmem(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-managed")
	waitFree(t, path, 0)
	out, err := s.ivshmemClient(s.token("managed", sessiontoken.TierShared, 1<<30), path, "managed_test", "shm").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "managed_test: OK") || strings.Contains(string(out), "coherent ") ||
		!strings.Contains(string(out), "ivshmem channel "+path) {
		t.Fatalf("managed_test over ivshmem:%s: %v\n%s", path, err, tail(string(out)))
	}
}

// Over TCP, plain pinned memory (cuMemAllocHost) gets a device side at its own address when a
// kernel may see it, and a kernel that waits for the CPU (the simulated backend's latch_wait)
// gets the CPU's writes while it runs, its own write to the same page kept
// (tests/pinned_test.c).
func TestPinnedOverTCP(t *testing.T) {
	s := startServer(t)
	out := s.run(s.token("pinned", sessiontoken.TierShared, 1<<30), "pinned_test")
	if !strings.Contains(out, "pinned_test: OK") {
		t.Fatalf("pinned_test over TCP:\n%s", out)
	}
}

package guesttest

import (
	"bufio"
	"gpucloud/internal/sessiontoken"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shmRun runs prog as a guest on this host: over gpuserverd's Unix socket, with an arena of
// mib MiB, tracing frames so the test sees which path the copies took.
func (s *gpuserverd) shmRun(t *testing.T, token, mib, prog string, args ...string) string {
	t.Helper()
	cmd := s.client(token, prog, args...)
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB="+mib, "GPUCLOUD_TRACE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s over unix:%s (arena %s MiB): %v\n%s", prog, s.sock, mib, err, tail(string(out)))
	}
	return string(out)
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// The C API suite and the arena's own test pass over shared memory, and their copies move no
// bytes on the socket: every copy is an arena copy.
func TestSharedMemory(t *testing.T) {
	s := startServer(t)
	// 16 MiB: 1 MiB staging chunks, copied by one thread; 64 MiB: 4 MiB chunks, copied by several.
	for _, tc := range []struct{ prog, mib, arena string }{
		{"api_test", "16", "16777216"}, {"shm_test", "16", "16777216"}, {"shm_test", "64", "67108864"},
	} {
		token := s.token("shm-"+tc.prog+"-"+tc.mib, "shared", 1<<30)
		t.Run(tc.prog+"/"+tc.mib+"MiB", func(t *testing.T) {
			out := s.shmRun(t, token, tc.mib, tc.prog)
			if !strings.Contains(out, "shared arena: "+tc.arena+" bytes") {
				t.Fatalf("no arena opened:\n%s", tail(out))
			}
			if !strings.Contains(out, "send MemcpyHtoDShm") || !strings.Contains(out, "send MemcpyDtoHShm") {
				t.Fatalf("no arena copies sent:\n%s", tail(out))
			}
			for _, socketCopy := range []string{"send MemcpyHtoD (", "send MemcpyDtoH (", "Striped", "LanesOpen"} {
				if strings.Contains(out, socketCopy) {
					t.Fatalf("a copy went over the socket (%q) with an arena open:\n%s", socketCopy, tail(out))
				}
			}
		})
	}
	// Each worker saw its guest go (the socket closing, while it waited on the ring) and ended
	// its session with a usage record.
	waitFor(t, "three usage records", func() bool { return len(s.usage()) == 3 })
}

// A refused arena request is told why and the session goes on over the socket alone.
func TestSharedMemoryRefused(t *testing.T) {
	s := startServer(t)
	out := s.shmRun(t, s.token("shm-refused", "shared", 1<<30), "8", "api_test") // below the 16 MiB minimum
	if !strings.Contains(out, "no shared memory (1): ShmOpen: bytes 8388608 outside [16777216,") {
		t.Fatalf("refusal not reported:\n%s", tail(out))
	}
	if strings.Contains(out, "MemcpyHtoDShm") || !strings.Contains(out, "send MemcpyHtoD (") {
		t.Fatalf("copies did not fall back to the socket:\n%s", tail(out))
	}
}

// A guest waiting on the rings learns that its worker was killed (the socket closes) and gets
// errors, not a hang; the server records the session.
func TestSharedMemoryKilledWorker(t *testing.T) {
	s := startServer(t)
	cmd := s.client(s.token("shm-doomed", "shared", 1<<30), "probe", "hold", "8")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB=16")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	hang := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() }) // a hang fails below
	defer hang.Stop()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("probe hold over shared memory: %q %v", line, err)
	}
	var pids []int
	waitFor(t, "one worker", func() bool { pids = s.workers(); return len(pids) == 1 })
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	line, _ := r.ReadString('\n')
	after, _ := r.ReadString('\n')
	if err := cmd.Wait(); err != nil || !strings.HasPrefix(line, "LOST 999") || after != "AFTER 999 999\n" {
		t.Fatalf("client of a killed worker: %v %q %q", err, line, after)
	}
	waitFor(t, "the usage record", func() bool { return len(s.usage()) == 1 })
}

// Mapped pinned memory is reached by kernels with no copy over shared memory (the arena is
// registered device-mapped); over TCP it is device memory the guest library keeps coherent.
func TestZeroCopy(t *testing.T) { sharedAndCoherent(t, "zerocopy_test") }

// Managed memory over shared memory is one copy at one pointer for the program and the device;
// over TCP it is device memory the guest library keeps coherent with the program's pages.
func TestManagedMemory(t *testing.T) { sharedAndCoherent(t, "managed_test") }

// Over shared memory, where the GPU's atomics on host memory are not the CPU's (an H100 on PCIe;
// GPUCLOUD_MANAGED=coherent here, the simulated device's being the CPU's), managed memory is
// coherent device memory as over TCP, and the device reports no concurrent managed access.
func TestManagedMemoryCoherentOverSharedMemory(t *testing.T) {
	s := startServer(t)
	cmd := s.client(s.token("s-managed-coherent", sessiontoken.TierShared, 1<<30), "managed_test", "coherent")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB=16", "GPUCLOUD_TRACE=1", "GPUCLOUD_MANAGED=coherent")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "managed_test: OK") || !strings.Contains(string(out), "coherent ") ||
		!strings.Contains(string(out), "ShmOpen") {
		t.Fatalf("managed_test over shared memory, coherent: %v\n%s", err, tail(string(out)))
	}
}

// A module's managed variables (NVIDIA's uvmlite) over both transports: the host pointer of each
// reads the module's initial values and what kernels write, and its writes reach the device,
// while a plain global on the same page keeps what the device wrote.
func TestManagedVariables(t *testing.T) {
	s := startServer(t)
	if out := s.shmRun(t, s.token("s-managedvar", sessiontoken.TierShared, 1<<30), "16", "managedvar_test"); !strings.Contains(out, "managedvar_test: OK") {
		t.Fatalf("managedvar_test over shared memory:\n%s", tail(out))
	}
	if out := s.run(s.token("s-managedvar-tcp", sessiontoken.TierShared, 1<<30), "managedvar_test"); !strings.Contains(out, "managedvar_test: OK") {
		t.Fatalf("managedvar_test over TCP:\n%s", tail(out))
	}
}

// sharedAndCoherent runs prog over shared memory ("shm": the arena's one copy) and over TCP
// ("tcp": software coherence, coherence_test.go).
func sharedAndCoherent(t *testing.T, prog string) {
	s := startServer(t)
	ok := prog + ": OK"
	if out := s.shmRun(t, s.token("s-"+prog, sessiontoken.TierShared, 1<<30), "16", prog, "shm"); !strings.Contains(out, ok) ||
		strings.Contains(out, "coherent ") {
		t.Fatalf("%s over shared memory (the arena, not coherence):\n%s", prog, tail(out))
	}
	cmd := s.client(s.token("s-"+prog+"-tcp", sessiontoken.TierShared, 1<<30), prog, "tcp")
	cmd.Env = append(cmd.Env, "GPUCLOUD_TRACE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ok) || !strings.Contains(string(out), "coherent ") {
		t.Fatalf("%s over TCP: %v\n%s", prog, err, tail(string(out)))
	}
}

// Over shared memory a graph may copy to and from the program's pinned memory, captured or as
// memcpy nodes: the device reaches the arena when the graph replays.
func TestGraphHostMemory(t *testing.T) {
	s := startServer(t)
	if out := s.shmRun(t, s.token("s-graphhost", sessiontoken.TierShared, 1<<30), "16", "graphhost_test"); !strings.Contains(out, "graphhost_test: OK") {
		t.Fatalf("graphhost_test over shared memory:\n%s", tail(out))
	}
}

// Over TCP and over shared memory a graph may copy to and from the program's pageable memory:
// memcpy nodes and captured copies go through bounce buffers refreshed around each launch.
func TestGraphPageableMemory(t *testing.T) {
	s := startServer(t)
	if out := s.run(s.token("s-graphpageable-tcp", sessiontoken.TierShared, 1<<30), "graphpageable_test"); !strings.Contains(out, "graphpageable_test: OK") {
		t.Fatalf("graphpageable_test over TCP:\n%s", tail(out))
	}
	if out := s.shmRun(t, s.token("s-graphpageable", sessiontoken.TierShared, 1<<30), "16", "graphpageable_test"); !strings.Contains(out, "graphpageable_test: OK") {
		t.Fatalf("graphpageable_test over shared memory:\n%s", tail(out))
	}
}

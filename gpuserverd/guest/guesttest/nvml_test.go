package guesttest

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

var nvmlBuild buildOnce

// buildNVML builds gpucloud's libnvidia-ml.so.1 and nvml_sim_test (linked with -lnvidia-ml) into
// the build folder, beside the guest libcuda.
func buildNVML(t *testing.T) string {
	t.Helper()
	return nvmlBuild.do(t, func(dir string) error {
		steps := [][]string{
			{"make", "-s", "-C", "../nvml", "BUILD=" + dir, "WERROR=-Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, "nvml_sim_test"), "../nvml/nvml_sim_test.c",
				"-L" + dir, "-lnvidia-ml", "-ldl", "-pthread"},
		}
		return runSteps(steps)
	})
}

// nvmlRun runs nvml_sim_test in mode with the token and wants its OK.
func nvmlRun(t *testing.T, s *gpuserverd, token, mode string, args ...string) {
	t.Helper()
	out, err := s.client(token, "nvml_sim_test", append([]string{mode}, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nvml_sim_test "+mode+": OK") {
		t.Fatalf("nvml_sim_test %s: %v\n%s", mode, err, out)
	}
}

// holdMemory starts a CUDA session of the token's instance holding mib MiB until the test ends.
func holdMemory(t *testing.T, s *gpuserverd, token string, mib int) {
	t.Helper()
	cmd := s.client(token, "nvml_sim_test", "hold", fmt.Sprint(mib))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
}

// TestNVMLSharedTier: on a shared-tier token NVML shows the instance's slice (memory total = the
// quota), its own use and its own process only (another instance holds memory on the same GPU),
// the same UUID as the CUDA side, and refuses the whole GPU's readings.
func TestNVMLSharedTier(t *testing.T) {
	buildNVML(t)
	s := startServer(t)
	holdMemory(t, s, s.token("s-other", sessiontoken.TierShared, 256<<20), 16)
	mine := s.token("s-mine", sessiontoken.TierShared, 512<<20)
	nvmlRun(t, s, mine, "shared", "512")
	// The run's CUDA session holds its 8 MiB until its worker has ended, a moment after the
	// program exits (as a real GPU's memory stays used until the context is torn down).
	waitFor(t, "the run's worker to end", func() bool { return len(s.workers()) == 1 })

	// gpucloud-smi, nvidia-smi's common forms: the same view, the other instance's process unseen.
	smi := func(args ...string) string {
		out, err := s.client(mine, "gpucloud-smi", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gpucloud-smi %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	want := "Simulated GPU (test double), " + sim.UUID(0) + ", 512 MiB, 0 MiB, [N/A]\n"
	if got := smi("--query-gpu=name,uuid,memory.total,memory.used,utilization.gpu", "--format=csv,noheader"); got != want {
		t.Fatalf("query: %q, want %q", got, want)
	}
	if got := smi("-L"); got != "GPU 0: Simulated GPU (test double) (UUID: "+sim.UUID(0)+")\n" {
		t.Fatalf("-L: %q", got)
	}
	if got := smi(); !strings.Contains(got, "0MiB /    512MiB") || !strings.Contains(got, "No running processes found") {
		t.Fatalf("table:\n%s", got)
	}
}

// TestNVMLDedicatedTier: a dedicated GPU shows its whole memory and the (simulated) readings.
func TestNVMLDedicatedTier(t *testing.T) {
	buildNVML(t)
	s := startServer(t)
	nvmlRun(t, s, s.token("s-ded", sessiontoken.TierDedicated, 0), "dedicated", fmt.Sprint(sim.DefaultMemory>>20))
}

// TestNVMLIsNoSession: NVML's connection is no CUDA session: it is not refused beside another
// instance's session on a GPU (as a second session would be on the dedicated tier), starts no
// worker and leaves no usage record.
func TestNVMLIsNoSession(t *testing.T) {
	buildNVML(t)
	s := startServer(t)
	holdMemory(t, s, s.token("s-holder", sessiontoken.TierShared, 256<<20), 0)
	workers := len(s.workers())
	nvmlRun(t, s, s.token("s-watcher", sessiontoken.TierDedicated, 0), "dedicated", fmt.Sprint(sim.DefaultMemory>>20))
	if n := len(s.workers()); n != workers {
		t.Fatalf("%d workers after the NVML run, %d before", n, workers)
	}
	for _, r := range s.usage() {
		if r.SessionID == "s-watcher" {
			t.Fatalf("usage record for the NVML connection: %+v", r)
		}
	}
	if m := s.get("/metrics"); !strings.Contains(m, "gpuserverd_sessions_accepted_total 1\n") ||
		strings.Contains(m, "gpuserverd_sessions_refused_total{") {
		t.Fatalf("NVML connection counted as a session (only the holder's should be):\n%s", m)
	}
}

// TestNVMLUnreachable: with no gpuserverd to reach, nvmlInit fails with "driver not loaded", as
// NVIDIA's does without a driver, and nothing crashes.
func TestNVMLUnreachable(t *testing.T) {
	dir := buildNVML(t)
	cmd := exec.Command(filepath.Join(dir, "nvml_sim_test"), "unreachable")
	cmd.Env = []string{"LD_LIBRARY_PATH=" + dir, "GPUCLOUD_ENDPOINT=127.0.0.1:1", "GPUCLOUD_TOKEN=x", "GPUCLOUD_CONFIG=/nonexistent"}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "cannot reach gpuserverd") {
		t.Fatalf("%v\n%s", err, out)
	}
}

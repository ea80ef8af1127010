package guesttest

import (
	"bufio"
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"gpucloud/internal/sessiontoken"
)

// TestLaunchFigures prints the launch path's cost over shared memory (tests/launchbench.c
// against gpuserverd on the simulated backend) when GPUCLOUD_BENCH=1: wall time per async launch
// and per launch + synchronise, and the CPU time the guest and its worker spend per launch.
// GPUCLOUD_BENCH_DIRS=name=dir,... compares builds side by side, runs interleaved (each dir
// holding gpuserverd, libcuda.so.1 and launchbench of one commit); without it, this tree's build.
// It measures, never asserts speed (docs/benchmarks/gpu-remote-h100.md, "Launch path").
func TestLaunchFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") == "" {
		t.Skip("set GPUCLOUD_BENCH=1 to measure")
	}
	type build struct{ name, dir string }
	var builds []build
	for _, kv := range strings.Split(os.Getenv("GPUCLOUD_BENCH_DIRS"), ",") {
		if name, dir, ok := strings.Cut(kv, "="); ok {
			builds = append(builds, build{name, dir})
		}
	}
	if len(builds) == 0 {
		builds = []build{{"this", buildAll(t)}}
	}
	rounds := 3
	rows := map[string][][4]float64{}
	pub, priv, _ := ed25519.GenerateKey(nil)
	for round := 0; round < rounds; round++ {
		for _, b := range builds {
			s := startServerFrom(t, b.dir, t.TempDir(), pub, priv, nil)
			rows[b.name] = append(rows[b.name], launchRun(t, s, b.dir)...)
		}
	}
	for _, b := range builds {
		t.Logf("%-6s median of %d: async %.2f µs/launch, launch+sync %.2f µs, guest CPU %.2f µs/launch, worker CPU %.2f µs/launch",
			b.name, len(rows[b.name]), medianOf(rows[b.name], 0), medianOf(rows[b.name], 1), medianOf(rows[b.name], 2),
			medianOf(rows[b.name], 3))
	}
}

// launchRun runs launchbench of dir over shared memory against s and returns its repetitions:
// async µs, sync µs, guest CPU µs per launch, worker CPU µs per launch.
func launchRun(t *testing.T, s *gpuserverd, dir string) [][4]float64 {
	t.Helper()
	const asyncN, syncN = 100000, 10000
	cmd := exec.Command(filepath.Join(dir, "launchbench"), "6", fmt.Sprint(asyncN), fmt.Sprint(syncN))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB=64",
		"GPUCLOUD_TOKEN="+s.token("s-launch", sessiontoken.TierDedicated, 0), "GPUCLOUD_CONFIG=/nonexistent")
	cmd.Stderr = &testWriter{t: t}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	var pids []int
	waitFor(t, "the worker", func() bool { pids = s.workers(); return len(pids) == 1 })
	var rows [][4]float64
	last := -1.0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var r [4]float64
		if _, err := fmt.Sscanf(sc.Text(), "LAUNCH %g %g %g", &r[0], &r[1], &r[2]); err != nil {
			t.Fatalf("launchbench: %q", sc.Text())
		}
		cpu := cpuNanos(pids[0])
		if last >= 0 { // the first repetition's worker time starts before the guest's
			r[3] = (cpu - last) / 1e3 / (asyncN + syncN)
			rows = append(rows, r)
		}
		last = cpu
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("launchbench: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the session's end, before the next server starts
	return rows
}

// cpuNanos is the CPU time pid's threads have run, from the scheduler's statistics (nanoseconds;
// threads that have ended are not counted, and the worker's do not end while it serves).
func cpuNanos(pid int) float64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	total := 0.0
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var ns float64
		fmt.Sscan(string(b), &ns)
		total += ns
	}
	return total
}

func medianOf(rows [][4]float64, col int) float64 {
	if len(rows) == 0 {
		return 0
	}
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = r[col]
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

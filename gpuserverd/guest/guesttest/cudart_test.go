package guesttest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

var cudartBuild buildOnce

// buildCudart builds gpucloud's libcudart.so.13 (by cudart's Makefile, which lists its sources)
// and rt_sim_test into the build folder, against cudart/testshim's stand-in for NVIDIA's
// cuda_runtime_api.h (CI has no CUDA toolkit).
func buildCudart(t *testing.T) string {
	t.Helper()
	return cudartBuild.do(t, func(dir string) error {
		steps := [][]string{
			{"make", "-s", "-C", "../cudart", "BUILD=" + dir, "INC=-Itestshim -I../include", "LIBDIRS=-L" + dir,
				"CFLAGS=-O2 -Wall -Wextra -Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../cudart/testshim", "-I../include", "-o",
				filepath.Join(dir, "rt_sim_test"), "../cudart/rt_sim_test.c", "../cudart/rt_sim_more.c", "../cudart/rt_sim_families.c",
				"../cudart/rt_sim_graphs.c", filepath.Join(dir, "libcudart.so.13"), "-L" + dir, "-lcuda"},
		}
		return runSteps(steps)
	})
}

// buildOnce runs a build into the build folder once per test binary; its error fails every caller.
type buildOnce struct {
	once sync.Once
	err  error
}

func (b *buildOnce) do(t *testing.T, build func(dir string) error) string {
	t.Helper()
	dir := buildAll(t)
	b.once.Do(func() { b.err = build(dir) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return dir
}

// runSteps runs each command in turn; the first that fails is the error, with its output.
func runSteps(steps [][]string) error {
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return &buildError{s, err, out}
		}
	}
	return nil
}

type buildError struct {
	step []string
	err  error
	out  []byte
}

func (e *buildError) Error() string {
	return strings.Join(e.step, " ") + ": " + e.err.Error() + "\n" + string(e.out)
}

// TestCudartOnSim runs a program driving gpucloud's libcudart as nvcc's generated code does
// (registration before main, <<<>>> launches through kernel handles and cudaLaunchKernel) over a
// real session on the simulated backend.
func TestCudartOnSim(t *testing.T) {
	buildCudart(t)
	runOK(t, startServer(t), "rt_sim_test")
}

// TestCudartTwoGPUs runs the same program with two GPUs in the session: copies between them.
func TestCudartTwoGPUs(t *testing.T) {
	buildCudart(t)
	s := startServer(t, "GPUSERVERD_SIM_DEVICES=2")
	tok := s.token("s-rt2", sessiontoken.TierDedicated, 0, func(c *sessiontoken.Claims) {
		c.GPUs = []string{sim.UUID(0), sim.UUID(1)}
	})
	if out := s.run(tok, "rt_sim_test"); !strings.Contains(out, "rt_sim_test: OK") {
		t.Fatalf("rt_sim_test:\n%s", out)
	}
}

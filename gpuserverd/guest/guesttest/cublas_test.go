package guesttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

var cublasBuild buildOnce

// buildCublas builds gpucloud's libcublas.so.13 and blas_sim_test into the build folder against
// cublas/testshim's stand-in for NVIDIA's cublas_v2.h (CI has no CUDA toolkit), and a foreign
// libcuda.so.1 (no gpucloud table) in a folder of its own.
func buildCublas(t *testing.T) string {
	t.Helper()
	return cublasBuild.do(t, func(dir string) error {
		foreign := filepath.Join(dir, "foreign")
		if err := os.MkdirAll(foreign, 0o755); err != nil {
			return err
		}
		inc := []string{"-I../cublas/testshim", "-I../include"}
		steps := [][]string{
			// make runs in ../cublas: its include paths are from there.
			{"make", "-s", "-C", "../cublas", "BUILD=" + dir, "INC=-Itestshim -I../include",
				"LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			append(append([]string{"gcc", "-Wall", "-Wextra", "-Werror"}, inc...), "-o",
				filepath.Join(dir, "blas_sim_test"), "../cublas/blas_sim_test.c", "-L"+dir, "-lcublas", "-lcuda", "-lm"),
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../include", "-fPIC", "-shared", "-fvisibility=hidden",
				"-Wl,-soname,libcuda.so.1", "-o", filepath.Join(foreign, "libcuda.so.1"), "../cublas/testshim/foreign_libcuda.c"},
		}
		return runSteps(steps)
	})
}

// TestCublasOnSim runs gpucloud's libcublas over the guest library and a real gpuserverd on the
// simulated backend: GEMMs against a CPU product, copies, streams, refusals, handles.
func TestCublasOnSim(t *testing.T) {
	buildCublas(t)
	runOK(t, startServer(t), "blas_sim_test")
}

// TestCublasRefusesForeignDriver: over a libcuda.so.1 that is not gpucloud's, cublasCreate fails
// and says why, rather than sending anything anywhere.
func TestCublasRefusesForeignDriver(t *testing.T) {
	dir := buildCublas(t)
	s := startServer(t)
	cmd := s.client(s.token("s-foreign", sessiontoken.TierDedicated, 0), "blas_sim_test", "foreign")
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(dir, "foreign")+":"+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "blas_sim_test foreign: OK") ||
		!strings.Contains(string(out), "is not gpucloud's guest library") {
		t.Fatalf("over a foreign libcuda: %v\n%s", err, out)
	}
}

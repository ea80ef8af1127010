package guesttest

import (
	"path/filepath"
	"testing"
)

var cusolverBuild buildOnce

// buildCusolver builds gpucloud's libcusolver.so.12 (no NVIDIA header) and
// solver_sim_test into the build folder, with the foreign libcuda.so.1 of the cuBLAS tests.
func buildCusolver(t *testing.T) string {
	t.Helper()
	buildCublas(t) // the foreign libcuda.so.1 comes with it
	return cusolverBuild.do(t, func(dir string) error {
		return runSteps([][]string{
			{"make", "-s", "-C", "../cusolver", "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			{"make", "-s", "-C", "../cusparse", "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", filepath.Join(dir, "solver_sim_test"),
				"../cusolver/solver_sim_test.c", "-L" + dir, "-lcusolver", "-lcusparse", "-lcuda", "-lm"},
		})
	})
}

// TestCusolverOnSim runs gpucloud's libcusolver over the guest library and a real gpuserverd on
// the simulated backend: an LU solve and a symmetric eigen-solve checked on the CPU, streams,
// objects, refusals; a sparse system solved by cusolverSp's host LU and QR, its host arrays staged
// through device memory (with cuSPARSE's matrix descriptor of gpucloud's libcusparse); a function
// that is not remoted is named on stderr once.
func TestCusolverOnSim(t *testing.T) {
	buildCusolver(t)
	noticedOnce(t, runOK(t, startServer(t), "solver_sim_test"), "libcusolver", "cusolverDnIRSParamsCreate")
}

// TestCusolverRefusesForeignDriver: over a libcuda.so.1 that is not gpucloud's, cusolverDnCreate
// fails and says why.
func TestCusolverRefusesForeignDriver(t *testing.T) {
	refusesForeignDriver(t, buildCusolver(t), "solver_sim_test", "s-foreign")
}

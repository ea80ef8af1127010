package guesttest

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var cublasLtBuild struct {
	once sync.Once
	err  error
}

// buildCublasLt builds gpucloud's libcublasLt.so.13 and lt_sim_test next to libcublas, against
// cublaslt/testshim's stand-in for NVIDIA's cublasLt.h.
func buildCublasLt(t *testing.T) string {
	t.Helper()
	dir := buildCublas(t)
	cublasLtBuild.once.Do(func() {
		steps := [][]string{
			{"make", "-s", "-C", "../cublaslt", "BUILD=" + dir, "INC=-Itestshim -I../cublas/testshim -I../include",
				"LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../cublaslt/testshim", "-I../cublas/testshim", "-I../include", "-o",
				filepath.Join(dir, "lt_sim_test"), "../cublaslt/lt_sim_test.c", "-L" + dir, "-lcublasLt", "-lcublas", "-lcuda", "-lm"},
		}
		for _, s := range steps {
			if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
				cublasLtBuild.err = &buildError{s, err, out}
				return
			}
		}
	})
	if cublasLtBuild.err != nil {
		t.Fatal(cublasLtBuild.err)
	}
	return dir
}

// TestCublasLtOnSim runs gpucloud's libcublasLt over the guest library and a real gpuserverd on
// the simulated backend: PyTorch's addmm sequence with bias epilogues on both kinds of handle,
// device scalars and batches, attributes, refusals.
func TestCublasLtOnSim(t *testing.T) {
	buildCublasLt(t)
	runOK(t, startServer(t), "lt_sim_test")
}

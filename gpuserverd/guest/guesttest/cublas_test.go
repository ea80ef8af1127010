package guesttest

import (
	"debug/elf"
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
	out := runOK(t, startServer(t), "blas_sim_test")
	if n := strings.Count(out, "gpucloud libcublas: cublasCaxpy_v2 is not remoted"); n != 1 {
		t.Fatalf("a function not remoted, called twice: said %d times, want once\n%s", n, out)
	}
}

// TestCublasPerOpStateCostsNoRoundTrip: PyTorch sets its handle's stream, workspace and math mode
// before every matmul; unchanged, they reach gpuserverd once, and the caller never waits for them
// (each was a round trip before, three per matmul: what kept an MLP step at 0.77 of native). The
// SGEMMs still run on that stream with that workspace, and a stream set alone puts the handle back
// on the worker's workspace, as cuBLAS's cublasSetStream does.
func TestCublasPerOpStateCostsNoRoundTrip(t *testing.T) {
	buildCublas(t)
	s := startServer(t)
	cmd := s.client(s.token("s-perop", sessiontoken.TierDedicated, 0), "blas_sim_test", "perop")
	cmd.Env = append(cmd.Env, "GPUCLOUD_TRACE=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.Contains(out, "blas_sim_test: OK") {
		t.Fatalf("blas_sim_test perop: %v\n%s", err, out)
	}
	count := func(frame string) (sent, waited int) {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "gpucloud-trace: send "+frame+" (") {
				sent++
				if strings.HasSuffix(line, " waits") {
					waited++
				}
			}
		}
		return sent, waited
	}
	for frame, want := range map[string]int{"BlasSetStream": 1, "BlasSetWorkspace": 2, "BlasSetMathMode": 1, "BlasGemm": 51} {
		if sent, waited := count(frame); sent != want || waited != 0 {
			t.Errorf("%s: sent %d times (%d waited for a reply), want %d, none waited", frame, sent, waited, want)
		}
	}
}

// TestCublasExportsWhatTorchImports: every cuBLAS and cuBLASLt name PyTorch 2.11 imports
// (cublas/torch-needs.txt, cublaslt/torch-needs.txt, from its wheel), and every one the wheel's
// cuSOLVER imports (cublas/cusolver-needs.txt, "name@version node", from nm on the H100 machine),
// and every one cublasXt.h declares (cublas/xt-names.txt), is a function of gpucloud's libraries
// under NVIDIA's version node, so they load (torch links them with RTLD_NOW).
func TestCublasExportsWhatTorchImports(t *testing.T) {
	dir := buildCublasLt(t)
	exports := map[string]map[string]string{} // node -> name -> version
	for _, lib := range []string{"libcublas.so.13", "libcublasLt.so.13"} {
		f, err := elf.Open(filepath.Join(dir, lib))
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.DynamicSymbols()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		exports[lib] = map[string]string{}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
				exports[lib][s.Name] = s.Version
			}
		}
	}
	for _, c := range []struct{ needs, node string }{
		{"../cublas/torch-needs.txt", "libcublas.so.13"},
		{"../cublaslt/torch-needs.txt", "libcublasLt.so.13"},
		{"../cublas/cusolver-needs.txt", ""},
		// cublasXt.h's names (not-remoted.sh writes them): simpleCUBLASXT failed at load time on
		// cublasXtDeviceSelect; refused, but they must resolve.
		{"../cublas/xt-names.txt", "libcublas.so.13"},
	} {
		needs, err := os.ReadFile(c.needs)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Fields(string(needs)) {
			name, node, ok := strings.Cut(line, "@")
			if !ok {
				node = c.node
			}
			n++
			if v, ok := exports[node][name]; !ok || v != node {
				t.Errorf("%s: %s: exported %v by %s, version %q", c.needs, name, ok, node, v)
			}
		}
		if n < 10 {
			t.Fatalf("%s: %d names", c.needs, n)
		}
	}
}

// TestCublasRefusesForeignDriver: over a libcuda.so.1 that is not gpucloud's, cublasCreate fails
// and says why, rather than sending anything anywhere.
func TestCublasRefusesForeignDriver(t *testing.T) {
	refusesForeignDriver(t, buildCublas(t), "blas_sim_test", "s-foreign")
}

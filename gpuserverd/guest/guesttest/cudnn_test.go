package guesttest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

var cudnnBuild struct {
	once sync.Once
	err  error
}

// buildCudnn builds gpucloud's libcudnn.so.9 (against its own declarations, shim/cudnn.h) and
// dnn_sim_test into the build folder, and the foreign libcuda.so.1 of the cuBLAS tests.
func buildCudnn(t *testing.T) string {
	t.Helper()
	dir := buildCublas(t) // the foreign libcuda.so.1 comes with it
	cudnnBuild.once.Do(func() {
		steps := [][]string{
			{"make", "-s", "-C", "../cudnn", "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../cudnn/shim", "-I../include", "-o", filepath.Join(dir, "dnn_sim_test"),
				"../cudnn/dnn_sim_test.c", "-L" + dir, "-lcudnn", "-lcuda", "-lm"},
		}
		for _, s := range steps {
			if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
				cudnnBuild.err = &buildError{s, err, out}
				return
			}
		}
	})
	if cudnnBuild.err != nil {
		t.Fatal(cudnnBuild.err)
	}
	return dir
}

// TestCudnnOnSim runs gpucloud's libcudnn over the guest library and a real gpuserverd on the
// simulated backend: backend descriptors and attributes, a legacy convolution against a CPU
// one, refusals; a call that is not forwarded is named on stderr once.
func TestCudnnOnSim(t *testing.T) {
	buildCudnn(t)
	out := runOK(t, startServer(t), "dnn_sim_test", "GPUCLOUD_TRACE=1")
	// Variant packs stay in the program: creating, filling, finalizing and destroying one sends
	// nothing; the one executed travels whole with the execution, which waits for no reply.
	executions := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "send DnnExecutePack (") {
			executions++
			if strings.HasSuffix(line, " waits") {
				t.Errorf("the execution waited for a reply: %s", line)
			}
		}
		if strings.Contains(line, "send DnnExecute (") {
			t.Errorf("an execution named a pack of the worker's: %s", line)
		}
	}
	// Size queries: the repeated workspace query is answered in the program, the refused one is
	// asked each time (legacy_conv: the algorithms, one workspace size, the refused size twice,
	// the convolution itself without a reply; refusals: the dropout states' size).
	legacyWaits := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "send DnnLegacy (") && strings.HasSuffix(line, " waits") {
			legacyWaits++
		}
	}
	if legacyWaits != 5 {
		t.Errorf("%d legacy calls waited for a reply, want 5", legacyWaits)
	}
	if executions != 1 {
		t.Errorf("%d DnnExecutePack frames, want 1 (backend_api's execution)", executions)
	}
	notice := "gpucloud libcudnn: cudnnSetDropoutDescriptor is not forwarded to gpuserverd"
	if n := strings.Count(out, notice); n != 1 {
		t.Errorf("the notice for cudnnSetDropoutDescriptor came %d times, want once:\n%s", n, out)
	}
}

// TestCudnnByValueIDs: a variant pack's host scalars go as values and its device addresses as
// they are, though the cuDNN frontend gives one unique id to a by-value scalar in one graph and to
// a device tensor in another, as PyTorch's attention forward and backward do
// (cudnn/byvalue_test.c; on the H100 the worker's cuDNN read the guest's address and crashed).
func TestCudnnByValueIDs(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "byvalue_test")
	build := exec.Command("gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-pthread", "-I../cudnn/shim", "-I../include",
		"-o", bin, "../cudnn/byvalue_test.c", "../cudnn/byvalue.c")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "byvalue_test: OK") {
		t.Fatalf("byvalue_test: %v\n%s", err, out)
	}
}

// TestCudnnRefusesForeignDriver: over a libcuda.so.1 that is not gpucloud's, cudnnCreate fails
// and says why.
func TestCudnnRefusesForeignDriver(t *testing.T) {
	refusesForeignDriver(t, buildCudnn(t), "dnn_sim_test", "s-foreign")
}

// TestCudnnExportsTorchsNames: libcudnn.so.9 defines every cuDNN name PyTorch 2.11 imports
// (cudnn/torch-needs-libcudnn.txt), and exports nothing else but cuDNN's names and its marker.
func TestCudnnExportsTorchsNames(t *testing.T) {
	dir := buildCudnn(t)
	out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(dir, "libcudnn.so.9")).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			have[strings.SplitN(f[2], "@", 2)[0]] = true
		}
	}
	f, err := os.Open("../cudnn/torch-needs-libcudnn.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var missing []string
	want := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name := strings.TrimSpace(sc.Text()); name != "" {
			want++
			if !have[name] {
				missing = append(missing, name)
			}
		}
	}
	if want < 80 {
		t.Fatalf("the list has %d names: not PyTorch's", want)
	}
	if len(missing) > 0 {
		t.Errorf("libcudnn.so.9 lacks %d of PyTorch's %d names: %v", len(missing), want, missing)
	}
	var stray []string
	for name := range have {
		if !strings.HasPrefix(name, "cudnn") && name != "gpucloud_cudnn_guest" && name != "libcudnn.so.9" {
			stray = append(stray, name)
		}
	}
	sort.Strings(stray)
	if len(stray) > 0 {
		t.Errorf("exports beyond cuDNN's names: %v", stray)
	}
}

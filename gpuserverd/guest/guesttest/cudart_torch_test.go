package guesttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCudartTorchSemantics runs torch_sim_test (cudart/torch_sim_test.c): what PyTorch relies on
// in gpucloud's runtime, on a shared-tier session with a quota, over TCP and over shared memory
// (where page-locked allocations must come from the session's arena).
func TestCudartTorchSemantics(t *testing.T) {
	dir := buildCudart(t)
	prog := filepath.Join(dir, "torch_sim_test")
	if out, err := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-I../cudart/testshim", "-I../include", "-o", prog,
		"../cudart/torch_sim_test.c", filepath.Join(dir, "libcudart.so.13"), "-L"+dir, "-lcuda").CombinedOutput(); err != nil {
		t.Fatalf("build torch_sim_test: %v\n%s", err, out)
	}
	s := startServer(t)
	const quota = 3 << 30
	for _, shm := range []bool{false, true} {
		name, args := "tcp", []string{strconv.Itoa(quota)}
		if shm {
			name, args = "shm", append(args, "shm")
		}
		t.Run(name, func(t *testing.T) {
			cmd := s.client(s.token("torch-"+name, "shared", quota), "torch_sim_test", args...)
			cmd.Env = append(cmd.Env, "GPUCLOUD_TRACE=1")
			if shm {
				cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=unix:"+s.sock, "GPUCLOUD_SHM_MIB=64")
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "torch_sim_test: OK") {
				t.Fatalf("torch_sim_test %v: %v\n%s", args, err, out)
			}
			// No capture was begun: whether a stream captures is answered here, without a round
			// trip (PyTorch asks around every allocation).
			if n := strings.Count(string(out), "send StreamGetCaptureInfo"); n != 0 {
				t.Errorf("capture state asked of gpuserverd %d times with no capture begun", n)
			}
			// One notice per refused call, however often it is refused.
			if n := strings.Count(string(out), "cudaGLGetDevices is not supported"); n != 1 {
				t.Errorf("cudaGLGetDevices notices: %d, want 1\n%s", n, out)
			}
		})
	}
}

// TestCudartExportsTorchNeeds: gpucloud's libcudart exports every runtime name PyTorch 2.11's
// libraries import (cudart/torch-needs.txt), so torch loads with it in place of NVIDIA's.
func TestCudartExportsTorchNeeds(t *testing.T) {
	dir := buildCudart(t)
	out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(dir, "libcudart.so.13")).Output()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			have[strings.SplitN(f[2], "@", 2)[0]] = true
		}
	}
	need, err := os.ReadFile("../cudart/torch-needs.txt")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(need))
	if len(names) < 90 {
		t.Fatalf("torch-needs.txt lists %d names; the list is 93", len(names))
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("libcudart.so.13 does not export %s, which torch imports", n)
		}
	}
}

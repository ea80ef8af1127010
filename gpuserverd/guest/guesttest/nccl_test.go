package guesttest

import (
	"bufio"
	"debug/elf"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var ncclBuild buildOnce

// buildNccl builds gpucloud's libnccl.so.2 and nccl_sim_test into the build folder (its own
// nccl.h: no NVIDIA headers).
func buildNccl(t *testing.T) string {
	t.Helper()
	return ncclBuild.do(t, func(dir string) error {
		return runSteps([][]string{
			{"make", "-s", "-C", "../nccl", "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
			{"gcc", "-Wall", "-Wextra", "-Werror", "-I../nccl", "-I../include", "-o", filepath.Join(dir, "nccl_sim_test"),
				"../nccl/nccl_sim_test.c", "-L" + dir, "-lnccl", "-lcuda"},
		})
	})
}

// TestNcclOnSim runs gpucloud's libnccl with 2 and 4 simulated GPUs in one session: all-reduce of
// known values with the right sums (sum, prod, max, min, avg; float32, int32, half, bf16,
// double), broadcast, reduce, all-gather, reduce-scatter, send/recv, refusals.
func TestNcclOnSim(t *testing.T) {
	buildNccl(t)
	for _, order := range [][]int{{1, 0}, {0, 1, 2, 3}} {
		s := startServer(t, "GPUSERVERD_SIM_DEVICES=4") // a dedicated GPU stays taken until a session's end is seen
		out := s.run(multiGPUToken(s, "s-nccl-"+strconv.Itoa(len(order)), order...), "nccl_sim_test", strconv.Itoa(len(order)))
		if !strings.Contains(out, "nccl_sim_test: OK") {
			t.Fatalf("%d ranks:\n%s", len(order), out)
		}
	}
}

// TestNcclForeignUniqueIDRefused: a unique id issued to one instance's session cannot build a
// communicator in another instance's session on the same server, while the first still holds it.
func TestNcclForeignUniqueIDRefused(t *testing.T) {
	buildNccl(t)
	s := startServer(t, "GPUSERVERD_SIM_DEVICES=2")
	owner := s.client(multiGPUToken(s, "s-nccl-owner", 0), "nccl_sim_test", "id")
	stdin, _ := owner.StdinPipe()
	stdout, _ := owner.StdoutPipe()
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); owner.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || len(strings.TrimSpace(line)) != 48 {
		t.Fatalf("owner's unique id: %q %v", line, err)
	}
	out := s.run(multiGPUToken(s, "s-nccl-intruder", 1), "nccl_sim_test", "foreign", strings.TrimSpace(line))
	if !strings.Contains(out, "foreign id: 4 (invalid argument") {
		t.Fatalf("foreign unique id not refused:\n%s", out)
	}
}

// TestNcclExportsItsAPI: every function of NCCL's C API (nccl/nccl-api.txt) and every name
// PyTorch 2.11 imports from it (nccl/torch-needs.txt) is exported, so a program linked against
// NVIDIA's NCCL loads gpucloud's.
func TestNcclExportsItsAPI(t *testing.T) {
	dir := buildNccl(t)
	f, err := elf.Open(filepath.Join(dir, "libnccl.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			have[s.Name] = true
		}
	}
	api, err := os.ReadFile("../nccl/nccl-api.txt")
	if err != nil {
		t.Fatal(err)
	}
	torch, err := os.ReadFile("../nccl/torch-needs.txt") // what PyTorch 2.11 links
	if err != nil {
		t.Fatal(err)
	}
	api = append(append(api, '\n'), torch...)
	n := 0
	for _, name := range strings.Split(string(api), "\n") {
		if name = strings.TrimSpace(name); name != "" && !strings.HasPrefix(name, "#") {
			n++
			if !have[name] {
				t.Errorf("%s is not exported", name)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d names in nccl-api.txt", n)
	}
}

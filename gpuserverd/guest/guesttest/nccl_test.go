package guesttest

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
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

// instanceToken is a token of instance inst for session, granted the simulated GPUs order.
func instanceToken(s *gpuserverd, inst, session string, order ...int) string {
	return s.token(session, sessiontoken.TierDedicated, 0, func(c *sessiontoken.Claims) {
		c.InstanceID, c.TenantID = inst, "tenant-"+inst
		c.GPUs = nil
		for _, o := range order {
			c.GPUs = append(c.GPUs, sim.UUID(o))
		}
	})
}

// TestNcclRanksInSeveralProcesses: N processes of one instance, each its own session (one rank
// per GPU, as torchrun starts them), build one communicator from the unique id rank 0's process
// got, and all-reduce, broadcast and pass a ring of sends with the right values; the same id
// presented by a session of another instance is refused while they hold it.
func TestNcclRanksInSeveralProcesses(t *testing.T) {
	buildNccl(t)
	for _, n := range []int{2, 3} {
		s := startServer(t, "GPUSERVERD_SIM_DEVICES=4")
		order := []int{2, 0, 3, 1}[:n]
		var procs []*exec.Cmd
		var outs []*strings.Builder
		start := func(args ...string) *exec.Cmd {
			cmd := s.client(instanceToken(s, "inst-ddp", fmt.Sprintf("s-rank%d-%d", len(procs), n), order...), "nccl_sim_test", args...)
			procs = append(procs, cmd)
			return cmd
		}
		r0 := start("rank", "0", strconv.Itoa(n))
		stdout, _ := r0.StdoutPipe()
		var e0 strings.Builder
		r0.Stderr = &e0
		if err := r0.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		line, err := br.ReadString('\n')
		id := strings.TrimSpace(line)
		if err != nil || len(id) != 48 {
			t.Fatalf("rank 0's unique id: %q %v (%s)", line, err, e0.String())
		}
		// Another instance's session (on a GPU of the server left free) presenting the id while
		// rank 0 holds it is refused.
		out := s.run(instanceToken(s, "inst-other", fmt.Sprintf("s-other-%d", n), []int{2, 0, 3, 1}[n]), "nccl_sim_test", "foreign", id)
		if !strings.Contains(out, "foreign id: 4 (invalid argument") {
			t.Fatalf("another instance joined the id:\n%s", out)
		}
		for r := 1; r < n; r++ {
			cmd := start("rank", strconv.Itoa(r), strconv.Itoa(n), id)
			var b strings.Builder
			cmd.Stdout, cmd.Stderr = &b, &b
			outs = append(outs, &b)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
		}
		rest, _ := io.ReadAll(br)
		if err := r0.Wait(); err != nil || !strings.Contains(string(rest), "nccl_sim_test: OK") {
			t.Fatalf("%d ranks, rank 0: %v\n%s%s", n, err, rest, e0.String())
		}
		for r, cmd := range procs[1:] {
			if err := cmd.Wait(); err != nil || !strings.Contains(outs[r].String(), "nccl_sim_test: OK") {
				t.Fatalf("%d ranks, rank %d: %v\n%s", n, r+1, err, outs[r].String())
			}
		}
	}
}

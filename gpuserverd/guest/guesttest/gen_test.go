package guesttest

import (
	"bufio"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

// TestGeneratedCalls runs gen_test: the generated generic path over a real session with two GPUs
// on the simulated backend (peer, stream, function, context and occupancy queries; an
// asynchronous setting; devices the session was not granted refused), and a refused function
// naming itself once.
func TestGeneratedCalls(t *testing.T) {
	s := startServer(t, "GPUSERVERD_SIM_DEVICES=3") // the third is the server's, not the session's
	tok := s.token("s-gen", sessiontoken.TierDedicated, 0, func(c *sessiontoken.Claims) {
		c.GPUs = []string{sim.UUID(0), sim.UUID(1)}
	})
	out := s.run(tok, "gen_test")
	if !strings.Contains(out, "gen_test: OK") {
		t.Fatalf("gen_test:\n%s", out)
	}
	notice := "gpucloud: cuLaunchGrid is not supported by gpucloud's driver (CUDA_ERROR_NOT_SUPPORTED)"
	if n := strings.Count(out, notice); n != 1 {
		t.Errorf("%q came %d times, want once:\n%s", notice, n, out)
	}
}

// TestExportedSet checks the guest libcuda.so.1 and gpucloud's libcudart.so.13 export every name
// NVIDIA's do (apigen/desc's copies of the lists), the runtime's under NVIDIA's version node, and
// that docs/cuda-coverage.md tells the truth about each: a name is refused exactly when the
// library's export is its generated stub (the same address as its local gc_stub_<name>).
func TestExportedSet(t *testing.T) {
	dir := buildCudart(t)
	for _, lib := range []struct{ file, list, version, section string }{
		{"libcuda.so.1", "libcuda-exports.txt", "", "## Driver API"},
		{"libcudart.so.13", "libcudart-exports.txt", "libcudart.so.13", "## Runtime API"},
	} {
		t.Run(lib.file, func(t *testing.T) {
			want := readList(t, filepath.Join("../../apigen/desc", lib.list))
			f, err := elf.Open(filepath.Join(dir, lib.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			dyn, err := f.DynamicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			exported := map[string]uint64{}
			for _, s := range dyn {
				if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
					exported[s.Name] = s.Value
					if lib.version != "" && s.Section != elf.SHN_ABS && s.Version != lib.version {
						t.Errorf("%s is exported under version %q, want %q", s.Name, s.Version, lib.version)
					}
				}
			}
			for _, name := range want {
				if _, ok := exported[name]; !ok {
					t.Errorf("%s does not export %s", lib.file, name)
				}
			}
			syms, err := f.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			stub := map[string]uint64{}
			for _, s := range syms {
				if n, ok := strings.CutPrefix(s.Name, "gc_stub_"); ok {
					stub[n] = s.Value
				}
			}
			doc := coverageRows(t, lib.section)
			refused := 0
			for _, name := range want {
				addr, ok := exported[name]
				if !ok || strings.Contains(name, ".") {
					continue
				}
				isStub := stub[name] != 0 && stub[name] == addr
				if isStub {
					refused++
				}
				status, ok := doc[name]
				if !ok {
					t.Errorf("docs/cuda-coverage.md has no row for %s", name)
				} else if (status == "refused") != isStub {
					t.Errorf("docs/cuda-coverage.md says %s is %s, but the library's export is %s", name, status,
						map[bool]string{true: "its refusing stub", false: "not a stub"}[isStub])
				}
			}
			t.Logf("%s: %d names, %d remoted, %d refused", lib.file, len(doc), len(doc)-refused, refused)
		})
	}
}

func readList(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// coverageRows reads the status of each function in one section of docs/cuda-coverage.md.
func coverageRows(t *testing.T, section string) map[string]string {
	t.Helper()
	f, err := os.Open("../../../docs/cuda-coverage.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = strings.HasPrefix(l, section)
		}
		if !in || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) < 4 {
			t.Fatalf("coverage row %q", l)
		}
		rows[strings.Trim(cells[1], " `")] = strings.TrimSpace(cells[2])
	}
	if len(rows) == 0 {
		t.Fatalf("no rows under %q in docs/cuda-coverage.md", section)
	}
	return rows
}

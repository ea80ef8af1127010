package guesttest

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// The math libraries remoted through the generic library call (backend/libcall.go): each guest
// library, the names it must export, its C test program and a function it refuses.
var mathLibs = []struct {
	exportedLib
	test    string
	refused string // a refused function the test calls twice
}{
	{exportedLib{"cusparse", "libcusparse.so.12", 5}, "sparse_sim_test", "cusparseSpVV"},
	{exportedLib{"cufft", "libcufft.so.12", 5}, "fft_sim_test", "cufftXtSetCallback"},
	{exportedLib{"curand", "libcurand.so.10", 0}, "rand_sim_test", "curandCreatePoissonDistribution"},
	{exportedLib{"nvjpeg", "libnvjpeg.so.13", 0}, "jpeg_sim_test", "nvjpegDecodeBatched"},
}

// exportedLib is a guest library whose exports TestMathLibsExportTheirHeaders checks: the
// functions of NVIDIA's header (apigen/desc/<dir>.txt) and, where torchMin is not 0, the names of
// <dir>/torch-needs.txt (what PyTorch 2.11 imports from it, shared/cuda-surface), a list that
// holds torchMin names at the least.
type exportedLib struct {
	dir, soname string
	torchMin    int
}

var mathBuild buildOnce

// buildMathLibs builds gpucloud's libcusparse, libcufft and libcurand and their test programs
// (no NVIDIA header: the libraries declare their own parameters, the tests what they call).
func buildMathLibs(t *testing.T) string {
	t.Helper()
	buildCublas(t) // the foreign libcuda.so.1
	return mathBuild.do(t, func(dir string) error {
		var steps [][]string
		for _, l := range mathLibs {
			steps = append(steps,
				[]string{"make", "-s", "-C", "../" + l.dir, "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -g -Wall -Wextra -Werror"},
				[]string{"gcc", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", filepath.Join(dir, l.test),
					"../" + l.dir + "/" + l.test + ".c", "-L" + dir, "-l:" + l.soname, "-lcuda", "-lm"})
		}
		return runSteps(steps)
	})
}

// soVersion is ".so.N" of a soname, which -l leaves off.
func soVersion(soname string) string { return soname[strings.Index(soname, ".so"):] }

// TestMathLibsOnSim runs each library's C test over the guest library and a real gpuserverd on
// the simulated backend: a cuFFT plan and executions, a CSR SpMV and SpMM, a cuRAND generator,
// each checked against the CPU; a refused function, called twice, is named on stderr once.
func TestMathLibsOnSim(t *testing.T) {
	buildMathLibs(t)
	for _, l := range mathLibs {
		t.Run(l.dir, func(t *testing.T) {
			out := runOK(t, startServer(t), l.test) // a dedicated session holds the GPU until it ends
			noticedOnce(t, out, "lib"+l.dir, l.refused)
		})
	}
}

// TestMathLibsRefuseForeignDriver: over a libcuda.so.1 that is not gpucloud's, each library's
// first call fails and says why.
func TestMathLibsRefuseForeignDriver(t *testing.T) {
	dir := buildMathLibs(t)
	for _, l := range mathLibs {
		refusesForeignDriver(t, dir, l.test, "s-foreign-"+l.dir)
	}
}

// noticedOnce: a program's output names fn, a function lib does not remote, exactly once.
func noticedOnce(t *testing.T, out, lib, fn string) {
	t.Helper()
	if n := strings.Count(out, "gpucloud "+lib+": "+fn+" is not remoted"); n != 1 {
		t.Errorf("the notice for %s came %d times, want once:\n%s", fn, n, out)
	}
}

// refusesForeignDriver runs prog foreign (built in dir) over the libcuda.so.1 of dir/foreign, which
// is not gpucloud's: prog checks its first call fails; the library must say why.
func refusesForeignDriver(t *testing.T, dir, prog, session string) {
	t.Helper()
	s := startServer(t)
	cmd := s.client(s.token(session, sessiontoken.TierDedicated, 0), prog, "foreign")
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(dir, "foreign")+":"+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), prog+" foreign: OK") || !strings.Contains(string(out), "is not gpucloud's guest library") {
		t.Errorf("%s over a foreign libcuda: %v\n%s", prog, err, out)
	}
}

// TestMathLibsExportTheirHeaders: each math library remoted through the generic library call,
// and cuSOLVER, exports under NVIDIA's version node (its soname) every function of NVIDIA's header
// (apigen/desc/<lib>.txt, extracted from it, and the few that return no status) and every name
// PyTorch 2.11 imports from it (<dir>/torch-needs.txt, from its wheel: torch links it with
// RTLD_NOW), and nothing but its own names.
func TestMathLibsExportTheirHeaders(t *testing.T) {
	dir := buildMathLibs(t)
	// cuSOLVER's library, into the same folder.
	buildCusolver(t)
	noStatus := map[string][]string{ // functions of the headers that return something else than a status
		"cusparse": {"cusparseGetErrorName", "cusparseGetErrorString", "cusparseGetMatType", "cusparseGetMatFillMode",
			"cusparseGetMatDiagType", "cusparseGetMatIndexBase"},
	}
	libs := []exportedLib{{"cusolver", "libcusolver.so.12", 100}}
	for _, l := range mathLibs {
		libs = append(libs, l.exportedLib)
	}
	for _, l := range libs {
		want := append(readNames(t, "../../apigen/desc/"+l.dir+".txt", "fn "), noStatus[l.dir]...)
		want = append(want, cplusplusOnly(t, l.dir)...)
		if l.torchMin > 0 {
			torch := readNames(t, "../"+l.dir+"/torch-needs.txt", "")
			if len(torch) < l.torchMin {
				t.Fatalf("%s/torch-needs.txt: %d names: not PyTorch's list", l.dir, len(torch))
			}
			want = append(want, torch...)
		}
		if len(want) < 25 {
			t.Fatalf("%s: %d names: not NVIDIA's header", l.dir, len(want))
		}
		prefix := strings.TrimSuffix(strings.TrimPrefix(l.soname, "lib"), soVersion(l.soname))
		checkExports(t, filepath.Join(dir, l.soname), prefix, "gpucloud_"+l.dir+"_guest", want)
	}
}

// checkExports: the library at path exports every name of want under NVIDIA's version node (its
// file name, the soname), and nothing but names that start with prefix, its marker and the
// version node itself.
func checkExports(t *testing.T, path, prefix, marker string, want []string) {
	t.Helper()
	soname := filepath.Base(path)
	have := definedSymbols(t, path)
	for _, n := range want {
		if v, ok := have[n]; !ok {
			t.Errorf("%s lacks %s", soname, n)
		} else if v != soname {
			t.Errorf("%s: %s has version %q, want %q", soname, n, v, soname)
		}
	}
	for n := range have {
		if !strings.HasPrefix(n, prefix) && n != marker && n != soname {
			t.Errorf("%s exports %s, not one of its names", soname, n)
		}
	}
}

// definedSymbols are the functions and objects a shared library defines, with their versions.
func definedSymbols(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && (elf.ST_TYPE(s.Info) == elf.STT_FUNC || elf.ST_TYPE(s.Info) == elf.STT_OBJECT) {
			have[s.Name] = s.Version
		}
	}
	return have
}

// readNames reads a list of names (one a line); with prefix, the second field of lines that
// start with it (a description's "fn <id> <name> ...").
func readNames(t *testing.T, path, prefix string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case prefix != "" && strings.HasPrefix(l, prefix):
			out = append(out, strings.Fields(l)[2])
		case prefix == "" && l != "" && !strings.HasPrefix(l, "#"):
			out = append(out, l)
		}
	}
	return out
}

// TestGuestImageTakesMathLibs: build.sh's -x takes gpucloud's libraries by their file names and
// refuses anything else, or a file that is not there, before it needs root.
func TestGuestImageTakesMathLibs(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, []byte("stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ x, want string }{
		{"/tmp/libevil.so.1", "not one of gpucloud's libraries"},
		{"/nonexistent/libcufft.so.12", "/nonexistent/libcufft.so.12 not found"},
	} {
		out, err := exec.Command("../../../deploy/guest-image/build.sh", "-l", lib, "-o", t.TempDir(), "-x", c.x).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("build.sh -x %s: want a refusal saying %q, got %v\n%s", c.x, c.want, err, out)
		}
	}
}

// cplusplusOnly are the names a library's header declares for C++ only, which the C extraction
// (desc/<lib>.txt) does not see: <dir>/cplusplus.c stubs them.
func cplusplusOnly(t *testing.T, dir string) []string {
	t.Helper()
	src, err := os.ReadFile("../" + dir + "/cplusplus.c")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`GC_NOT_REMOTED_AS\((\w+),`).FindAllStringSubmatch(string(src), -1) {
		out = append(out, m[1])
	}
	return out
}

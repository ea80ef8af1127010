package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Fake libcublas builds (test doubles) reach the loader's refusals without a GPU: a library
// missing a symbol, and gpucloud's own guest libcublas (which must never serve a worker: it would
// forward the worker's calls to itself). Loading happens once per process, so each case runs in
// a child process, as the fake driver's do.

//go:embed blas.c
var blasC string

const fakeBlasEnv = "GPUCLOUD_TEST_FAKE_CUBLAS_CHILD"

// buildFakeBlas writes a library with every symbol blas.c resolves except skip, plus extra.
func buildFakeBlas(t *testing.T, name, skip, extra string) string {
	t.Helper()
	return buildFakeLib(t, name, blasC, skip, extra)
}

// buildFakeLib writes a library defining every "cublas..." symbol src resolves, except skip,
// each returning CUBLAS_STATUS_INTERNAL_ERROR, plus extra.
func buildFakeLib(t *testing.T, name, src, skip, extra string) string {
	return buildFakeOf(t, name+".so", src, "cublas", 14, skip, extra)
}

// buildFakeOf writes the library file defining every symbol src resolves by a quoted name that
// starts with prefix, except skip, each returning ret, plus extra: a stand-in for a vendor library
// the cuda backend loads (cuBLAS, cuDNN, NCCL).
func buildFakeOf(t *testing.T, file, src, prefix string, ret int, skip, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(extra + "\n")
	for _, m := range regexp.MustCompile(`"(`+prefix+`[A-Za-z0-9_]+)"`).FindAllStringSubmatch(src, -1) {
		if m[1] != skip {
			fmt.Fprintf(&b, "int %s(void) { return %d; }\n", m[1], ret)
		}
	}
	return buildLib(t, file, b.String())
}

// TestFakeBlasChild is the child's side; it only runs under fakeBlasEnv.
func TestFakeBlasChild(t *testing.T) {
	if os.Getenv(fakeBlasEnv) == "" {
		t.Skip("runs only as the child of TestBlasLoad")
	}
	err := loadBlas()
	fmt.Printf("RESULT status=%d err=%v\n", backend.BlasStatusOf(err), err)
}

func TestBlasLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lib    string
		status backend.BlasStatus
		want   []string
	}{
		{"complete", buildFakeBlas(t, "complete", "", ""), backend.BlasSuccess, nil},
		{"missing a symbol", buildFakeBlas(t, "partial", "cublasDgemmStridedBatched", ""), backend.BlasNotInitialized,
			[]string{"load cuBLAS", "missing symbol cublasDgemmStridedBatched"}},
		{"gpucloud's guest libcublas", buildFakeBlas(t, "guest", "", "const int gpucloud_cublas_guest = 1;"),
			backend.BlasNotInitialized, []string{"is gpucloud's guest libcublas, not NVIDIA's"}},
		{"absent", "/nonexistent/libcublas.so.13", backend.BlasNotInitialized, []string{"/nonexistent/libcublas.so.13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLoadChild(t, "TestFakeBlasChild", tc.status, tc.want, fakeBlasEnv+"=1", "GPUSERVERD_CUBLAS="+tc.lib)
		})
	}
}

// checkLoadChild runs the test child in a process of its own with env (loading happens once per
// process) and checks the status and error text it printed.
func checkLoadChild[S ~int32](t *testing.T, child string, status S, want []string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`RESULT status=(\d+) err=(.*)`).FindStringSubmatch(string(out))
	if line == nil {
		t.Fatalf("child printed no result:\n%s", out)
	}
	if line[1] != fmt.Sprint(int32(status)) {
		t.Fatalf("status %s, want %d (%s)", line[1], status, line[2])
	}
	for _, w := range want {
		if !strings.Contains(line[2], w) {
			t.Errorf("error %q does not contain %q", line[2], w)
		}
	}
}

package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A fake libcuda.so.1 (a test double, built here with the C compiler cgo uses) lets the tests
// reach the driver's own failure modes on a machine without a GPU: cuInit refusing, no devices.
// Its stubs are generated from the symbol list in driver.c, so it always has every symbol the
// backend resolves. It runs in a child process, because a loaded driver stays loaded.

const fakeEnv = "GPUCLOUD_TEST_FAKE_CUDA"

// driverC is embedded so the test binary also runs away from its source folder (the GPU machine).
//
//go:embed driver.c
var driverC string

func TestMain(m *testing.M) {
	if lib := os.Getenv(fakeEnv); lib != "" {
		libraryName = lib
	}
	os.Exit(m.Run())
}

func buildFakeDriver(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#include <stdlib.h>\n")
	b.WriteString("static int env(const char *n) { const char *v = getenv(n); return v ? atoi(v) : 0; }\n")
	b.WriteString("int cuInit(unsigned f) { (void)f; return env(\"FAKE_CUINIT\"); }\n")
	b.WriteString("int cuDeviceGetCount(int *n) { *n = env(\"FAKE_COUNT\"); return 0; }\n")
	b.WriteString("int cuGetErrorName(int r, const char **s) { *s = r == 100 ? \"CUDA_ERROR_NO_DEVICE\" : \"CUDA_ERROR_FAKE\"; return 0; }\n")
	seen := map[string]bool{"cuInit": true, "cuDeviceGetCount": true, "cuGetErrorName": true}
	for _, m := range regexp.MustCompile(`"(cu[A-Za-z0-9_]+)"`).FindAllStringSubmatch(driverC, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			fmt.Fprintf(&b, "int %s(void) { return 999; }\n", m[1])
		}
	}
	return buildLib(t, "libcuda.so.1", b.String())
}

// buildLib compiles C source into a shared library named name in a fresh folder, with the C
// compiler cgo uses.
func buildLib(t *testing.T, name, src string) string {
	t.Helper()
	dir := t.TempDir()
	c, lib := filepath.Join(dir, "src.c"), filepath.Join(dir, name)
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, c).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return lib
}

// TestFakeDriverChild is the child's side; it only runs under fakeEnv.
func TestFakeDriverChild(t *testing.T) {
	if os.Getenv(fakeEnv) == "" {
		t.Skip("runs only as the child of TestOpenFailsOnDriverErrors")
	}
	_, err := backend.Open(Kind)
	fmt.Printf("RESULT code=%d err=%v\n", backend.ResultOf(err), err)
}

func TestOpenFailsOnDriverErrors(t *testing.T) {
	lib := buildFakeDriver(t)
	for _, tc := range []struct {
		name        string
		env         []string
		code        backend.Result
		wantInError []string
	}{
		{"cuInit says no device", []string{"FAKE_CUINIT=100", "FAKE_COUNT=1"}, backend.ErrNoDevice,
			[]string{"backend cuda", "cuInit", "CUDA_ERROR_NO_DEVICE", "(100)"}},
		{"no devices counted", []string{"FAKE_CUINIT=0", "FAKE_COUNT=0"}, backend.ErrNoDevice,
			[]string{"backend cuda", "sees no device"}},
		{"driver works", []string{"FAKE_CUINIT=0", "FAKE_COUNT=2"}, backend.Success, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeDriverChild$", "-test.v")
			cmd.Env = append(os.Environ(), append(tc.env, fakeEnv+"="+lib)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			line := regexp.MustCompile(`RESULT code=(\d+) err=(.*)`).FindStringSubmatch(string(out))
			if line == nil {
				t.Fatalf("child printed no result:\n%s", out)
			}
			if line[1] != fmt.Sprint(int32(tc.code)) {
				t.Fatalf("code %s, want %d (%s)", line[1], tc.code, line[2])
			}
			for _, w := range tc.wantInError {
				if !strings.Contains(line[2], w) {
					t.Errorf("error %q does not contain %q", line[2], w)
				}
			}
		})
	}
}

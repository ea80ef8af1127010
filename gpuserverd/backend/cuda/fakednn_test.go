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

// Fake libcudnn builds (test doubles) reach the loader's refusals without a GPU, as the fake
// libcublas ones do: a library missing a symbol, and gpucloud's own guest libcudnn (which would
// forward the worker's calls to itself). Each case runs in a child process (loading is once).

//go:embed dnn.c
var dnnC string

const fakeDnnEnv = "GPUCLOUD_TEST_FAKE_CUDNN_CHILD"

func buildFakeDnn(t *testing.T, name, skip, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(extra + "\n")
	for _, m := range regexp.MustCompile(`"(cudnn[A-Za-z0-9_]+)"`).FindAllStringSubmatch(dnnC, -1) {
		if m[1] != skip {
			fmt.Fprintf(&b, "int %s(void) { return 4000; }\n", m[1])
		}
	}
	return buildLib(t, name+".so", b.String())
}

// TestFakeDnnChild is the child's side; it only runs under fakeDnnEnv.
func TestFakeDnnChild(t *testing.T) {
	if os.Getenv(fakeDnnEnv) == "" {
		t.Skip("runs only as the child of TestDnnLoad")
	}
	err := loadDnn()
	fmt.Printf("RESULT status=%d err=%v\n", backend.DnnStatusOf(err), err)
}

func TestDnnLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lib    string
		status backend.DnnStatus
		want   []string
	}{
		{"complete", buildFakeDnn(t, "complete", "", ""), backend.DnnSuccess, nil},
		{"missing a symbol", buildFakeDnn(t, "partial", "cudnnBackendExecute", ""), backend.DnnNotInitialized,
			[]string{"load cuDNN", "missing symbol cudnnBackendExecute"}},
		{"gpucloud's guest libcudnn", buildFakeDnn(t, "guest", "", "const int gpucloud_cudnn_guest = 1;"),
			backend.DnnNotInitialized, []string{"is gpucloud's guest libcudnn, not NVIDIA's"}},
		{"absent", "/nonexistent/libcudnn.so.9", backend.DnnNotInitialized, []string{"/nonexistent/libcudnn.so.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeDnnChild$", "-test.v")
			cmd.Env = append(os.Environ(), fakeDnnEnv+"=1", "GPUSERVERD_CUDNN="+tc.lib)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			line := regexp.MustCompile(`RESULT status=(\d+) err=(.*)`).FindStringSubmatch(string(out))
			if line == nil {
				t.Fatalf("child printed no result:\n%s", out)
			}
			if line[1] != fmt.Sprint(int32(tc.status)) {
				t.Fatalf("status %s, want %d (%s)", line[1], tc.status, line[2])
			}
			for _, w := range tc.want {
				if !strings.Contains(line[2], w) {
					t.Errorf("error %q does not contain %q", line[2], w)
				}
			}
		})
	}
}

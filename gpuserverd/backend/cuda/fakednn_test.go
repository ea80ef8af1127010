package cuda

import (
	_ "embed"
	"fmt"
	"os"
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
	return buildFakeOf(t, name+".so", dnnC, "cudnn", 4000, skip, extra)
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
			checkLoadChild(t, "TestFakeDnnChild", tc.status, tc.want, fakeDnnEnv+"=1", "GPUSERVERD_CUDNN="+tc.lib)
		})
	}
}

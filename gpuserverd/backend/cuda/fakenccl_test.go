package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Fake libnccl builds (test doubles) reach the NCCL loader's refusals without a GPU, each in a
// child process (loading happens once per process). The NCCL calls themselves have not run on a
// GPU (docs/multi-gpu.md).

//go:embed nccl.c
var ncclC string

const fakeNcclEnv = "GPUCLOUD_TEST_FAKE_NCCL_CHILD"

// buildFakeNccl writes a library with every "nccl..." symbol nccl.c resolves except skip, plus extra.
func buildFakeNccl(t *testing.T, name, skip, extra string) string {
	return buildFakeOf(t, "libnccl-"+name+".so", ncclC, "nccl", 3, skip, extra)
}

// TestFakeNcclChild is the child's side; it only runs under fakeNcclEnv.
func TestFakeNcclChild(t *testing.T) {
	if os.Getenv(fakeNcclEnv) == "" {
		t.Skip("runs only as the child of TestNcclLoad")
	}
	err := loadNccl()
	fmt.Printf("RESULT status=%d err=%v\n", backend.BlasStatusOf(err), err)
}

func TestNcclLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lib    string
		status backend.BlasStatus
		want   []string
	}{
		{"complete", buildFakeNccl(t, "complete", "", ""), backend.BlasSuccess, nil},
		{"missing a symbol", buildFakeNccl(t, "partial", "ncclReduceScatter", ""), backend.BlasNotInitialized,
			[]string{"load NCCL", "missing symbol ncclReduceScatter"}},
		{"gpucloud's guest libnccl", buildFakeNccl(t, "guest", "", "const int gpucloud_nccl_guest = 1;"),
			backend.BlasNotInitialized, []string{"is gpucloud's guest libnccl, not NVIDIA's"}},
		{"absent", "/nonexistent/libnccl.so.2", backend.BlasNotInitialized, []string{"/nonexistent/libnccl.so.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLoadChild(t, "TestFakeNcclChild", tc.status, tc.want, fakeNcclEnv+"=1", "GPUSERVERD_NCCL="+tc.lib)
		})
	}
}

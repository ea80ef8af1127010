package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Fake libcublasLt builds (test doubles), as fakeblas_test.go's: the loader refuses one missing a
// symbol and gpucloud's own guest libcublasLt, and loads cuBLAS first.

//go:embed lt.c
var ltC string

const fakeLtEnv = "GPUCLOUD_TEST_FAKE_CUBLASLT_CHILD"

// TestFakeLtChild is the child's side; it only runs under fakeLtEnv.
func TestFakeLtChild(t *testing.T) {
	if os.Getenv(fakeLtEnv) == "" {
		t.Skip("runs only as the child of TestLtLoad")
	}
	err := loadLt()
	fmt.Printf("RESULT status=%d err=%v\n", backend.BlasStatusOf(err), err)
}

func TestLtLoad(t *testing.T) {
	blas := buildFakeBlas(t, "blas-for-lt", "", "")
	for _, tc := range []struct {
		name, blas, lt string
		status         backend.BlasStatus
		want           []string
	}{
		{"complete", blas, buildFakeLib(t, "lt-complete", ltC, "", ""), backend.BlasSuccess, nil},
		{"missing a symbol", blas, buildFakeLib(t, "lt-partial", ltC, "cublasLtMatmulAlgoGetHeuristic", ""),
			backend.BlasNotInitialized, []string{"load cuBLASLt", "missing symbol cublasLtMatmulAlgoGetHeuristic"}},
		{"gpucloud's guest libcublasLt", blas, buildFakeLib(t, "lt-guest", ltC, "", "const int gpucloud_cublaslt_guest = 1;"),
			backend.BlasNotInitialized, []string{"is gpucloud's guest libcublasLt, not NVIDIA's"}},
		{"no cuBLAS", "/nonexistent/libcublas.so.13", buildFakeLib(t, "lt-nocublas", ltC, "", ""),
			backend.BlasNotInitialized, []string{"load cuBLAS:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLoadChild(t, "TestFakeLtChild", tc.status, tc.want, fakeLtEnv+"=1", "GPUSERVERD_CUBLAS="+tc.blas,
				"GPUSERVERD_CUBLASLT="+tc.lt)
		})
	}
}

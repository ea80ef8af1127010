package cuda

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A recording fake libcusolver (a test double) over a fake driver shows, without a GPU, what the
// cuda backend hands NVIDIA's cuSOLVER through the generated typed calls: object ids rewritten to
// the pointers cuSOLVER gave, values (int, int64, double) and device addresses as they came, host
// outputs and host scratch pointing into the worker's memory, outputs read back. It runs in a
// child process (loading is once).

const fakeSolverCalls = recordingPreamble + `
#include <string.h>
int cusolverDnCreate(void **h) { *h = obj(); printf("CREATE handle %p\n", *h); return 0; }
int cusolverDnDestroy(void *h) { printf("DESTROY handle %p\n", h); return 0; }
int cusolverDnCreateParams(void **p) { *p = obj(); printf("CREATE params %p\n", *p); return 0; }
int cusolverDnCreateSyevjInfo(void **p) { *p = obj(); printf("CREATE syevj %p\n", *p); return 0; }
int cusolverDnXsyevjSetTolerance(void *info, double tol) { printf("TOLERANCE %p %g\n", info, tol); return 0; }
int cusolverDnSetStream(void *h, void *s) { printf("STREAM %p %p\n", h, s); return 0; }
int cusolverDnDgetrf_bufferSize(void *h, int m, int n, double *A, int lda, int *lwork) {
	printf("GETRF_BUFSIZE %p %d %d %p %d\n", h, m, n, (void *)A, lda); *lwork = 4321; return 0;
}
int cusolverDnDgetrf(void *h, int m, int n, double *A, int lda, double *ws, int *ipiv, int *info) {
	printf("GETRF %p %d %d %p %d %p %p %p\n", h, m, n, (void *)A, lda, (void *)ws, (void *)ipiv, (void *)info); return 0;
}
int cusolverDnSsyevdx(void *h, int jobz, int range, int uplo, int n, float *A, int lda, float vl, float vu, int il, int iu,
                      int *meig, float *W, float *work, int lwork, int *info) {
	printf("SYEVDX %d %g %g %d %d %d\n", n, vl, vu, il, iu, lwork); *meig = 3; return 0;
}
int cusolverDnXgeqrf(void *h, void *p, int64_t m, int64_t n, int ta, void *A, int64_t lda, int tt, void *tau, int ct,
                     void *bd, size_t wsd, void *bh, size_t wsh, int *info) {
	memset(bh, 0xab, wsh); /* the worker's scratch must be writable for its whole size */
	printf("XGEQRF %p %p %lld %lld %lld %p %zu host %d %zu\n", h, p, (long long)m, (long long)n, (long long)lda, bd, wsd, bh != NULL, wsh);
	return 0;
}
int cusolverDnXgeqrf_bufferSize(void *h, void *p, int64_t m, int64_t n, int ta, const void *A, int64_t lda, int tt,
                                const void *tau, int ct, size_t *wsd, size_t *wsh) {
	printf("XGEQRF_BUFSIZE %p %p %lld %lld %d %p %lld %d %p %d\n", h, p, (long long)m, (long long)n, ta, A, (long long)lda, tt, tau, ct);
	*wsd = 1536; *wsh = 0; return 0;
}
int cusolverDnSgesvdaStridedBatched(void *h, int jobz, int rank, int m, int n, const float *A, int lda, long long sA,
                                    float *S, long long sS, float *U, int ldu, long long sU, float *V, int ldv, long long sV,
                                    float *work, int lwork, int *info, double *nrm, int batch) {
	for (int i = 0; i < batch; i++) nrm[i] = 0.5 + i;
	printf("GESVDA %d %lld\n", batch, sA); return 0;
}
`

func buildRecordingSolver(t *testing.T) string {
	t.Helper()
	return buildLib(t, "libcusolver.so.12", fakeSolverCalls)
}

const recordingSolverEnv = "GPUCLOUD_TEST_RECORDING_CUSOLVER_CHILD"

// TestRecordingSolverChild is the child's side: calls through a Context whose CUDA context is NULL.
func TestRecordingSolverChild(t *testing.T) {
	if os.Getenv(recordingSolverEnv) == "" {
		t.Skip("runs only as the child of TestSolverCallsReachCuSOLVER")
	}
	if err := load(libraryName); err != nil {
		t.Fatal(err)
	}
	c := newContext()
	try := func(name string, words []uint64, host ...[]byte) ([]uint64, [][]byte, error) {
		f := fn(t, name)
		h := make([][]byte, len(words))
		for i, p := range f.Params {
			if p.Kind == backend.PStaged && len(host) > 0 {
				h[i], host = host[0], host[1:]
			}
		}
		out, err := c.LibCall(backend.LibCall{Func: f, Words: words, Host: h})
		return out, h, err
	}
	call := func(name string, words ...uint64) []uint64 {
		out, _, err := try(name, words)
		if err != nil {
			fmt.Printf("ERROR %s: %v\n", name, err)
			os.Stdout.Sync()
			t.Fatal(err)
		}
		fmt.Printf("OUT %s %v\n", name, out)
		return out
	}
	h := call("cusolverDnCreate", 0)[0]
	p := call("cusolverDnCreateParams", 0)[0]
	j := call("cusolverDnCreateSyevjInfo", 0)[0]
	call("cusolverDnXsyevjSetTolerance", j, math.Float64bits(2.5e-7))
	call("cusolverDnSetStream", h, 0)
	call("cusolverDnDgetrf_bufferSize", h, 5, 6, 0x7f0000001000, 7, 0)
	call("cusolverDnDgetrf", h, 5, 6, 0x7f0000001000, 7, 0x7f0000002000, 0x7f0000003000, 0x7f0000004000)
	call("cusolverDnXgeqrf", h, p, 1<<33, 3, 1, 0x7f0000001000, 1<<33, 1, 0x7f0000002000, 1, 0x7f0000006000, 512, 1, 4096, 0x7f0000004000)
	call("cusolverDnXgeqrf_bufferSize", h, 0, 4, 3, 1, 0x7f0000001000, 4, 1, 0x7f0000002000, 1, 0, 0)
	// A staged host array (h_R_nrmF, batch 3): NVIDIA's function writes host memory, which comes back.
	_, staged, err := try("cusolverDnSgesvdaStridedBatched", []uint64{h, 1, 2, 3, 3, 0x7f0000001000, 3, 1 << 40, 0, 3, 0, 3, 9, 0, 3, 9, 0, 0, 0x7f0000004000, 0x7f0000009000, 3},
		make([]byte, 24))
	fmt.Printf("STAGED %v %v\n", staged[19], err)
	_, _, err = try("cusolverDnXgeqrf", []uint64{h, p, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1, backend.MaxHostWork + 1, 0})
	fmt.Printf("SCRATCH %v\n", backend.LibStatusOf(backend.LibSolver, err))
	call("cusolverDnDestroy", h)
	fmt.Println("CHILD DONE")
}

func TestSolverCallsReachCuSOLVER(t *testing.T) {
	out := runRecordingChild(t, "TestRecordingSolverChild", recordingSolverEnv+"=1", "GPUSERVERD_CUSOLVER="+buildRecordingSolver(t))
	ptr := func(re string) string { return recorded(t, out, re) }
	handle, params, syevj := ptr(`CREATE handle (0x[0-9a-f]+)`), ptr(`CREATE params (0x[0-9a-f]+)`), ptr(`CREATE syevj (0x[0-9a-f]+)`)
	for _, want := range []string{
		// ids are cuSOLVER's pointers, a double by value reached it as a double.
		fmt.Sprintf("TOLERANCE %s 2.5e-07", syevj),
		fmt.Sprintf("STREAM %s (nil)", handle),
		fmt.Sprintf("GETRF_BUFSIZE %s 5 6 0x7f0000001000 7", handle),
		"OUT cusolverDnDgetrf_bufferSize [4321]",
		fmt.Sprintf("GETRF %s 5 6 0x7f0000001000 7 0x7f0000002000 0x7f0000003000 0x7f0000004000", handle),
		// 64-bit values and the worker's host scratch of the size asked for.
		fmt.Sprintf("XGEQRF %s %s 8589934592 3 8589934592 0x7f0000006000 512 host 1 4096", handle, params),
		// NULL params (NVIDIA's default algorithms, as PyTorch passes) reach cuSOLVER as NULL.
		fmt.Sprintf("XGEQRF_BUFSIZE %s (nil) 4 3 1 0x7f0000001000 4 1 0x7f0000002000 1", handle),
		"OUT cusolverDnXgeqrf_bufferSize [1536 0]",
		// a long long stride; a staged host array written element by element (0.5, 1.5, 2.5).
		"GESVDA 3 1099511627776", "STAGED [0 0 0 0 0 0 224 63 0 0 0 0 0 0 248 63 0 0 0 0 0 0 4 64] <nil>",
		"SCRATCH 3",
		fmt.Sprintf("DESTROY handle %s", handle),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

const fakeSolverLoadEnv = "GPUCLOUD_TEST_FAKE_CUSOLVER_CHILD"

// TestFakeSolverLoadChild is the child's side; it only runs under fakeSolverLoadEnv.
func TestFakeSolverLoadChild(t *testing.T) {
	if os.Getenv(fakeSolverLoadEnv) == "" {
		t.Skip("runs only as the child of TestSolverLoad")
	}
	err := loadLib(backend.LibSolver, fn(t, "cusolverDnCreate"))
	fmt.Printf("RESULT status=%d err=%v\n", backend.LibStatusOf(backend.LibSolver, err), err)
}

// The loader takes NVIDIA's library and refuses gpucloud's own guest libcusolver (it would
// forward the worker's calls to itself) and an absent one, with CUSOLVER_STATUS_NOT_SUPPORTED.
func TestSolverLoad(t *testing.T) {
	for _, tc := range []struct {
		name, lib string
		status    int32
		want      []string
	}{
		{"complete", buildRecordingSolver(t), 0, nil},
		{"gpucloud's guest libcusolver", buildLib(t, "guest.so", "int cusolverDnCreate(void) { return 0; }\nconst int gpucloud_cusolver_guest = 1;"),
			9, []string{"load cuSOLVER", "is gpucloud's guest library, not NVIDIA's"}},
		{"absent", "/nonexistent/libcusolver.so.12", 9, []string{"/nonexistent/libcusolver.so.12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLoadChild(t, "TestFakeSolverLoadChild", tc.status, tc.want, fakeSolverLoadEnv+"=1", "GPUSERVERD_CUSOLVER="+tc.lib)
		})
	}
}

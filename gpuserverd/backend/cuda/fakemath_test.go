package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Recording fake cuSPARSE, cuFFT and cuRAND libraries (test doubles) over a fake driver show,
// without a GPU, what the generated calls (libcalls_gen.c) hand NVIDIA's functions: values with
// their C types (floats in float registers), host inputs as pointers to their bytes, host scalars
// as pointers to their value with the handle's pointer mode set to match, device addresses as
// they came, and outputs back. It runs in a child process (loading is once per process).

const fakeSparse = `
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }
int cusparseCreate(void **h) { *h = malloc(16); printf("CREATE %p\n", *h); return 0; }
static int mode;
int cusparseSetPointerMode(void *h, int m) { mode = m; printf("MODE %p %d\n", h, m); return 0; }
int cusparseSpMV(void *h, int op, const void *alpha, void *a, void *x, const void *beta, void *y, int ct, int alg, void *buf) {
	if (mode == 0) printf("SPMV %p %d %g %p %p %g %p %d %d %p\n", h, op, *(const float *)alpha, a, x, *(const float *)beta, y, ct, alg, buf);
	else printf("SPMV-DEVICE %p %p\n", alpha, beta);
	return 0;
}
`

const fakeFft = `
#include <stdio.h>
#include <stddef.h>
__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }
int cufftCreate(int *p) { *p = 41; return 0; }
int cufftMakePlanMany64(int p, int rank, long long *n, long long *in, long long is, long long id, long long *on,
                        long long os, long long od, int type, long long batch, size_t *ws) {
	printf("PLAN %d %d %lld %lld %s %lld %#x %lld\n", p, rank, n[0], n[1], in ? "embed" : "basic", id, type, batch);
	*ws = 4096;
	return 0;
}
int cufftExecC2C(int p, void *in, void *out, int dir) { printf("EXEC %d %p %p %d\n", p, in, out, dir); return 6; }
`

const fakeRand = `
#include <stdio.h>
#include <stddef.h>
__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }
int curandGenerateNormal(void *g, float *out, size_t n, float mean, float sd) { printf("NORMAL %p %p %zu %g %g\n", g, out, n, mean, sd); return 0; }
int curandGenerateNormalDouble(void *g, double *out, size_t n, double mean, double sd) { printf("NORMALD %zu %g %g\n", n, mean, sd); return 0; }
`

const recordingMathEnv = "GPUCLOUD_TEST_RECORDING_MATHLIBS_CHILD"

func fn(t *testing.T, name string) *backend.LibFunc {
	f := backend.LibFuncByName(name)
	if f == nil {
		t.Fatalf("%s is not remoted", name)
	}
	return f
}

// TestRecordingMathChild is the child's side: calls through a Context whose CUDA context is NULL.
func TestRecordingMathChild(t *testing.T) {
	if os.Getenv(recordingMathEnv) == "" {
		t.Skip("runs only as the child of TestMathCallsReachLibraries")
	}
	if err := load(libraryName); err != nil {
		t.Fatal(err)
	}
	c := newContext()
	call := func(name string, words []uint64, host ...[]byte) []uint64 {
		f := fn(t, name)
		h := make([][]byte, len(words))
		for i, p := range f.Params {
			if (p.Kind == backend.PHost || p.Kind == backend.PScalar) && len(host) > 0 && words[i] != 0 && (p.Kind == backend.PHost || words[i]&backend.ScalarHostBit != 0) {
				h[i], host = host[0], host[1:]
			}
		}
		out, err := c.LibCall(backend.LibCall{Func: f, Words: words, Host: h})
		fmt.Printf("RESULT %s %v %v\n", name, out, err)
		return out
	}
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	h := call("cusparseCreate", []uint64{0})[0]
	host4 := backend.ScalarHostBit | 4
	call("cusparseSpMV", []uint64{h, 0, host4, 0xa000, 0xb000, host4, 0xc000, 0, 1, 0xd000}, f32(2.5), f32(-1))
	call("cusparseSpMV", []uint64{h, 0, 0x7f0000001000, 0xa000, 0xb000, 0x7f0000001004, 0xc000, 0, 1, 0})
	p := call("cufftCreate", []uint64{0})[0]
	n := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 16), 32)
	call("cufftMakePlanMany64", []uint64{p, 2, 16, 0, 1, 0, 0, 1, 0, 0x29, 3, 0}, n)
	call("cufftExecC2C", []uint64{p, 0xe000, 0xf000, uint64(1)})
	call("curandGenerateNormal", []uint64{0x77, 0x9000, 64, uint64(math.Float32bits(3.5)), uint64(math.Float32bits(0.25))})
	call("curandGenerateNormalDouble", []uint64{0x77, 0x9000, 8, math.Float64bits(-2), math.Float64bits(0.125)})
	call("curandGenerateUniform", []uint64{0x77, 0x9000, 8}) // not in the fake: missing
	fmt.Println("CHILD DONE")
}

func TestMathCallsReachLibraries(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecordingMathChild$", "-test.v")
	cmd.Env = append(os.Environ(), recordingMathEnv+"=1", fakeEnv+"="+buildBindingDriver(t),
		"GPUSERVERD_CUSPARSE="+buildLib(t, "libcusparse.so.12", fakeSparse),
		"GPUSERVERD_CUFFT="+buildLib(t, "libcufft.so.12", fakeFft),
		"GPUSERVERD_CURAND="+buildLib(t, "libcurand.so.10", fakeRand))
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.Contains(out, "CHILD DONE") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{
		// Host scalars: the handle set to host pointer mode, the values read through pointers.
		"MODE 0x", " 0\nSPMV 0x", " 0 2.5 0xa000 0xb000 -1 0xc000 0 1 0xd000",
		// Device scalars: device pointer mode, the addresses as they came.
		" 1\nSPMV-DEVICE 0x7f0000001000 0x7f0000001004",
		// A plan's dimensions through a pointer to their bytes, no embedding as NULL; the work size back.
		"PLAN 41 2 16 32 basic 0 0x29 3", "RESULT cufftMakePlanMany64 [4096] <nil>",
		// An execution's failure is cuFFT's status (CUFFT_EXEC_FAILED).
		"EXEC 41 0xe000 0xf000 1", "RESULT cufftExecC2C [] cuFFT: cufftExecC2C: status 6",
		// Floats and doubles reach the library as themselves.
		"NORMAL 0x77 0x9000 64 3.5 0.25", "NORMALD 8 -2 0.125",
		"RESULT curandGenerateUniform [] cuRAND: curandGenerateUniform: status 999: NVIDIA's cuRAND has no curandGenerateUniform",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

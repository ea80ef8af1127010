package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A recording fake libcudnn (a test double) over a fake driver shows, without a GPU, what the
// cuda backend hands NVIDIA's cuDNN: descriptor- and handle-typed attribute elements rewritten
// from ids to the pointers cuDNN gave, device addresses passed through, descriptors filled in,
// and a legacy convolution's descriptors and scalars. It runs in a child process (loading is once).

// fakeDnnCalls implements the calls under test; every other symbol dnn.c resolves returns 4000.
const fakeDnnCalls = recordingPreamble + `
int cudnnCreate(void **h) { *h = obj(); printf("CREATE handle %p\n", *h); return 0; }
int cudnnBackendCreateDescriptor(int type, void **d) { *d = obj(); printf("CREATE desc %d %p\n", type, *d); return 0; }
int cudnnBackendSetAttribute(void *d, int name, int type, int64_t n, const void *e) {
	printf("SET %p %d %d %lld %#llx\n", d, name, type, (long long)n, n ? (unsigned long long)*(const uint64_t *)e : 0ull);
	/* A variant pack with a by-value scalar: the second pointer must be readable host memory. */
	if (type == 6 && n == 2 && name == 1001) printf("BYVALUE %#llx %g\n", (unsigned long long)((void *const *)e)[0], *((float *const *)e)[1]);
	return 0;
}
int cudnnBackendGetAttribute(void *d, int name, int type, int64_t req, int64_t *n, void *e) {
	*n = 3;
	if (type == 15) { for (int64_t i = 0; i < req; i++) printf("FILL %p %p\n", d, ((void **)e)[i]); return 0; }
	for (int64_t i = 0; i < req && i < 3; i++) ((int64_t *)e)[i] = 7 + i;
	return 0;
}
int cudnnCreateTensorDescriptor(void **d) { *d = obj(); return 0; }
int cudnnSetTensorNdDescriptor(void *d, int t, int nb, const int *dims, const int *str) {
	printf("TENSOR %p %d %d %d %d\n", d, t, nb, dims[1], str[0]); return 0;
}
int cudnnDestroyTensorDescriptor(void *d) { printf("FREE %p\n", d); return 0; }
int cudnnCreateFilterDescriptor(void **d) { *d = obj(); return 0; }
int cudnnSetFilterNdDescriptor(void *d, int t, int f, int nb, const int *dims) { printf("FILTER %p %d\n", d, dims[0]); return 0; }
int cudnnDestroyFilterDescriptor(void *d) { printf("FREE %p\n", d); return 0; }
int cudnnCreateConvolutionDescriptor(void **d) { *d = obj(); return 0; }
int cudnnSetConvolutionNdDescriptor(void *d, int n, const int *p, const int *s, const int *dl, int m, int c) {
	printf("CONV %p %d %d %d\n", d, n, p[0], m); return 0;
}
int cudnnSetConvolutionGroupCount(void *d, int g) { printf("GROUPS %d\n", g); return 0; }
int cudnnSetConvolutionMathType(void *d, int m) { return 0; }
int cudnnDestroyConvolutionDescriptor(void *d) { printf("FREE %p\n", d); return 0; }
int cudnnConvolutionForward(void *h, const float *alpha, void *xd, void *x, void *wd, void *w, void *cd, int algo,
                            void *ws, size_t wsn, const float *beta, void *yd, void *y) {
	printf("CONVFWD %p %g %p %p %p %d %p %zu %g %p %p\n", h, *alpha, xd, x, wd, algo, ws, wsn, *beta, yd, y);
	return 0;
}
`

// recordingPreamble starts a recording fake library's C source.
const recordingPreamble = `
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
/* Real heap addresses: Go's runtime checks the pointers it holds. */
static void *obj(void) { return malloc(16); }
/* The child exits through Go, which flushes no C stdio. */
__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }
`

// runRecordingChild runs the test child over the binding driver with env and returns what it
// printed, which must end with CHILD DONE.
func runRecordingChild(t *testing.T, child string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v")
	cmd.Env = append(append(os.Environ(), fakeEnv+"="+buildBindingDriver(t)), env...)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.Contains(out, "CHILD DONE") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return out
}

// recorded is the first group of re in a recording child's output.
func recorded(t *testing.T, out, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in:\n%s", re, out)
	}
	return m[1]
}

func buildRecordingDnn(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(fakeDnnCalls)
	have := map[string]bool{}
	for _, m := range regexp.MustCompile(`int (cudnn[A-Za-z0-9_]+)\(`).FindAllStringSubmatch(fakeDnnCalls, -1) {
		have[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`"(cudnn[A-Za-z0-9_]+)"`).FindAllStringSubmatch(dnnC, -1) {
		if !have[m[1]] {
			have[m[1]] = true
			fmt.Fprintf(&b, "int %s(void) { return 4000; }\n", m[1])
		}
	}
	return buildLib(t, "libcudnn.so.9", b.String())
}

// buildBindingDriver is a fake driver whose current context is always NULL (a Context of ctx
// NULL is then bound without a call); everything else fails.
func buildBindingDriver(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("int cuCtxGetCurrent(void **c) { *c = 0; return 0; }\n")
	seen := map[string]bool{"cuCtxGetCurrent": true}
	for _, m := range regexp.MustCompile(`"(cu[A-Za-z0-9_]+)"`).FindAllStringSubmatch(driverC, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			fmt.Fprintf(&b, "int %s(void) { return 999; }\n", m[1])
		}
	}
	return buildLib(t, "libcuda.so.1", b.String())
}

const recordingEnv = "GPUCLOUD_TEST_RECORDING_CUDNN_CHILD"

// TestRecordingDnnChild is the child's side: calls through a Context whose CUDA context is NULL.
func TestRecordingDnnChild(t *testing.T) {
	if os.Getenv(recordingEnv) == "" {
		t.Skip("runs only as the child of TestDnnCallsReachCuDNN")
	}
	if err := load(libraryName); err != nil {
		t.Fatal(err)
	}
	c := newContext()
	must := func(err error) {
		if err != nil {
			fmt.Printf("ERROR %v\n", err)
			os.Stdout.Sync()
			t.Fatal(err)
		}
	}
	h, err := c.DnnCreate()
	must(err)
	d1, err := c.DnnDescCreate(17)
	must(err)
	d2, err := c.DnnDescCreate(15)
	must(err)
	id := func(v backend.Handle) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
	must(c.DnnSetAttribute(d2, backend.DnnAttr{Name: 801, Type: backend.DnnTypeDescriptor, Count: 1, Elems: id(d1)}))
	must(c.DnnSetAttribute(d2, backend.DnnAttr{Name: 800, Type: backend.DnnTypeHandle, Count: 1, Elems: id(h)}))
	must(c.DnnSetAttribute(d1, backend.DnnAttr{Name: 1001, Type: backend.DnnTypeVoidPtr, Count: 1, Elems: id(0x7f0000001234)}))
	// A variant pack's pointers with a host scalar passed by value (an attention's scale).
	pack, err := c.DnnDescCreate(16)
	must(err)
	hv := binary.LittleEndian.AppendUint64(nil, 0)
	hv = binary.LittleEndian.AppendUint64(hv, 0x7f0000005678)
	hv = binary.LittleEndian.AppendUint64(hv, 4)
	hv = binary.LittleEndian.AppendUint64(hv, uint64(math.Float32bits(0.125)))
	must(c.DnnSetAttribute(pack, backend.DnnAttr{Name: 1001, Type: backend.DnnTypeHostValues, Count: 2, Elems: hv}))
	hv[16] = 9 // more bytes than a scalar has
	fmt.Printf("OVERSIZED %v\n", c.DnnSetAttribute(pack, backend.DnnAttr{Name: 1001, Type: backend.DnnTypeHostValues, Count: 2, Elems: hv}) != nil)
	_ = c.DnnDescDestroy(pack) // frees the values; the fake cuDNN refuses the destroy itself
	fmt.Printf("REFUSED %v\n", c.DnnSetAttribute(d2, backend.DnnAttr{Name: 801, Type: backend.DnnTypeDescriptor, Count: 1, Elems: id(999)}) != nil)
	n, got, err := c.DnnGetAttribute(d1, 902, backend.DnnTypeInt64, 2, nil)
	must(err)
	fmt.Printf("GOT %d %x\n", n, got)
	_, _, err = c.DnnGetAttribute(d2, 801, backend.DnnTypeDescriptor, 1, []backend.Handle{d1})
	must(err)
	var x, w, cv, y backend.DnnDesc
	copy(x[:], []int32{1, 0, 4, 1, 3, 5, 5, 0, 0, 0, 0, 75, 25, 5, 1})
	copy(w[:], []int32{2, 0, 0, 4, 8, 3, 3, 3})
	copy(cv[:], []int32{3, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0})
	copy(y[:], []int32{1, 0, 4, 1, 8, 5, 5, 0, 0, 0, 0, 200, 25, 5, 1})
	_, err = c.DnnLegacy(backend.DnnLegacyCall{Op: backend.DnnOpConvForward, Handle: h, Descs: []backend.DnnDesc{x, w, cv, y},
		Args: []uint64{1, 0xa000, 0xb000, 0xc000, 4096, 0xd000, math.Float64bits(2), math.Float64bits(0.5)}})
	must(err)
	fmt.Println("CHILD DONE")
}

func TestDnnCallsReachCuDNN(t *testing.T) {
	out := runRecordingChild(t, "TestRecordingDnnChild", recordingEnv+"=1", "GPUSERVERD_CUDNN="+buildRecordingDnn(t))
	ptr := func(re string) string { return recorded(t, out, re) }
	handle, tensor, graph := ptr(`CREATE handle (0x[0-9a-f]+)`), ptr(`CREATE desc 17 (0x[0-9a-f]+)`), ptr(`CREATE desc 15 (0x[0-9a-f]+)`)
	for _, want := range []string{
		// ids became cuDNN's own pointers; a device address went as it came.
		fmt.Sprintf("SET %s 801 15 1 %s", graph, tensor),
		fmt.Sprintf("SET %s 800 0 1 %s", graph, handle),
		fmt.Sprintf("SET %s 1001 6 1 0x7f0000001234", tensor),
		// A by-value scalar reached cuDNN as a pointer to its value; the device address as it came.
		"BYVALUE 0x7f0000005678 0.125", "OVERSIZED true",
		"REFUSED true",
		"GOT 3 07000000000000000800000000000000",
		fmt.Sprintf("FILL %s %s", graph, tensor),
		// The legacy call: NVIDIA's descriptors from the words, float scalars, the addresses.
		"TENSOR", "FILTER", "CONV", "GROUPS 1",
		fmt.Sprintf("CONVFWD %s 2 ", handle), " 0xa000 ", " 1 0xc000 4096 0.5 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "FREE "); n != 4 {
		t.Errorf("%d legacy descriptors freed, want 4:\n%s", n, out)
	}
}

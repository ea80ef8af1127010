package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Recording fake NPP libraries (test doubles, NVIDIA's eleven sonames in one folder) over a fake
// driver show, without a GPU, what the generated calls by signature (nppcalls_gen.c) hand NVIDIA's
// functions: structs by value (NppiSize, NppiPoint) as themselves, the NppStreamContext with the
// context's stream and device in place of the guest's, fixed host arrays through pointers to their
// bytes, floats in float registers, a host output back; a function found in whichever library has
// it. It runs in a child process (loading is once per process).

const fakeNppTypes = `
#include <stdio.h>
#include <stddef.h>
__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }
typedef struct { int width, height; } NppiSize;
typedef struct { int x, y; } NppiPoint;
typedef struct { void *hStream; int nCudaDeviceId, nMultiProcessorCount, nMaxThreadsPerMultiProcessor, nMaxThreadsPerBlock;
	size_t nSharedMemPerBlock; int major, minor; unsigned nStreamFlags; int nReserved0; } NppStreamContext;
`

var fakeNpp = map[string]string{
	"libnppidei.so.13": `int nppiSet_8u_C1R_Ctx(const unsigned char v, unsigned char *d, int step, NppiSize roi, NppStreamContext c) {
	printf("SET %d %p %d %dx%d stream=%p dev=%d mp=%d\n", v, (void *)d, step, roi.width, roi.height, c.hStream, c.nCudaDeviceId, c.nMultiProcessorCount);
	return 0;
}`,
	"libnppial.so.13": `int nppiAddC_8u_C3RSfs_Ctx(const unsigned char *s, int ss, const unsigned char k[3], unsigned char *d, int sd, NppiSize roi, int sf, NppStreamContext c) {
	printf("ADDC %p %d %d,%d,%d %p %d %dx%d %d\n", (void *)s, ss, k[0], k[1], k[2], (void *)d, sd, roi.width, roi.height, sf);
	(void)c;
	return 0;
}
int nppiMulC_32f_C1R_Ctx(const float *s, int ss, const float k, float *d, int sd, NppiSize roi, NppStreamContext c) {
	printf("MULC %g %dx%d\n", k, roi.width, roi.height);
	(void)s; (void)ss; (void)d; (void)sd; (void)c;
	return -6;
}`,
	"libnppif.so.13": `int nppiSegmentWatershedGetBufferSize_8u_C1R(NppiSize roi, size_t *n) { *n = (size_t)roi.width * roi.height * 3; return 0; }
int nppiFilterBox_8u_C1R_Ctx(const unsigned char *s, int ss, unsigned char *d, int sd, NppiSize roi, NppiSize m, NppiPoint a, NppStreamContext c) {
	printf("BOX %dx%d mask %dx%d anchor %d,%d\n", roi.width, roi.height, m.width, m.height, a.x, a.y);
	(void)s; (void)ss; (void)d; (void)sd; (void)c;
	return 0;
}`,
}

const recordingNppEnv = "GPUCLOUD_TEST_RECORDING_NPP_CHILD"

// TestRecordingNppChild is the child's side: calls through a Context whose CUDA context is NULL.
func TestRecordingNppChild(t *testing.T) {
	if os.Getenv(recordingNppEnv) == "" {
		t.Skip("runs only as the child of TestNppCallsReachLibraries")
	}
	if err := load(libraryName); err != nil {
		t.Fatal(err)
	}
	c := newContext()
	size := func(w, h int32) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(w)), uint32(h))
	}
	ctx := func(stream uint64) []byte { // hStream, nCudaDeviceId 5, nMultiProcessorCount 132, the rest 0
		b := make([]byte, 48)
		binary.LittleEndian.PutUint64(b, stream)
		binary.LittleEndian.PutUint32(b[8:], 5)
		binary.LittleEndian.PutUint32(b[12:], 132)
		return b
	}
	call := func(name string, words []uint64, host ...[]byte) {
		f := fn(t, name)
		h := make([][]byte, len(words))
		for i, p := range f.Params {
			if p.Kind == backend.PHost || p.Kind == backend.PByValue || p.Kind == backend.PStreamCtx {
				h[i], host = host[0], host[1:]
			}
		}
		out, err := c.LibCall(backend.LibCall{Func: f, Words: words, Host: h})
		fmt.Printf("RESULT %s %v %v\n", name, out, err)
	}
	call("nppiSet_8u_C1R_Ctx", []uint64{7, 0xa000, 64, 8, 48}, size(37, 11), ctx(0))
	call("nppiSet_8u_C1R_Ctx", []uint64{7, 0xa000, 64, 8, 48}, size(37, 11), ctx(0x99)) // no such stream
	call("nppiAddC_8u_C3RSfs_Ctx", []uint64{0xb000, 96, 3, 0xc000, 96, 8, 2, 48}, []byte{1, 2, 250}, size(32, 4), ctx(0))
	call("nppiMulC_32f_C1R_Ctx", []uint64{0xb000, 128, uint64(math.Float32bits(2.5)), 0xc000, 128, 8, 48}, size(32, 4), ctx(0))
	call("nppiFilterBox_8u_C1R_Ctx", []uint64{0xb000, 64, 0xc000, 64, 8, 8, 8, 48}, size(30, 9), size(3, 5), size(1, 2), ctx(0))
	call("nppiSegmentWatershedGetBufferSize_8u_C1R", []uint64{8, 0}, size(512, 512))
	call("nppiSegmentWatershed_8u_C1IR_Ctx", []uint64{0xa000, 512, 0xb000, 2048, 0, 0, 8, 0xc000, 48}, size(512, 512), ctx(0)) // not in the fakes
	fmt.Println("CHILD DONE")
}

func TestNppCallsReachLibraries(t *testing.T) {
	dir := t.TempDir()
	for _, l := range []string{"libnppc", "libnppial", "libnppicc", "libnppidei", "libnppif", "libnppig", "libnppim", "libnppist",
		"libnppisu", "libnppitc", "libnpps"} {
		name := l + ".so.13"
		if err := os.Rename(buildLib(t, name, fakeNppTypes+fakeNpp[name]), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecordingNppChild$", "-test.v")
	cmd.Env = append(os.Environ(), recordingNppEnv+"=1", fakeEnv+"="+buildBindingDriver(t), "GPUSERVERD_NPP="+dir)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.Contains(out, "CHILD DONE") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{
		// The context's default stream and device (0) replace the guest's; the rest as sent.
		"SET 7 0xa000 64 37x11 stream=(nil) dev=0 mp=132", "RESULT nppiSet_8u_C1R_Ctx [] <nil>",
		// A stream the context does not have is refused before NPP is called.
		"RESULT nppiSet_8u_C1R_Ctx [] nppiSet_8u_C1R_Ctx: stream context:",
		// A fixed host array through a pointer to its bytes.
		"ADDC 0xb000 96 1,2,250 0xc000 96 32x4 2",
		// A float by value; NPP's own status comes back (NPP_SIZE_ERROR).
		"MULC 2.5 32x4", "RESULT nppiMulC_32f_C1R_Ctx [] NPP: nppiMulC_32f_C1R_Ctx: status -6",
		// Three structs by value in a row.
		"BOX 30x9 mask 3x5 anchor 1,2",
		// A host output, written by NVIDIA's function, back as the call's output.
		"RESULT nppiSegmentWatershedGetBufferSize_8u_C1R [786432] <nil>",
		"RESULT nppiSegmentWatershed_8u_C1IR_Ctx [] NPP: nppiSegmentWatershed_8u_C1IR_Ctx: status -9999: NVIDIA's NPP has no nppiSegmentWatershed_8u_C1IR_Ctx",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "SET ") != 1 {
		t.Errorf("the call naming no stream reached NPP:\n%s", out)
	}
}

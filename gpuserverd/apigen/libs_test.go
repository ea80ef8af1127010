package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A math library's annotation that does not fit NVIDIA's prototype is a generation error naming
// the function: a kind per parameter, values for scalars, addresses and outputs for pointers, a
// stream for cudaStream_t, host lengths naming a parameter, no outputs on a call sent without
// waiting, and no name the header lacks.
func TestLibAnnotationsMustFitPrototypes(t *testing.T) {
	const desc = "fn 12010 cufftExecC2C cufftResult (cufftHandle plan, cufftComplex *idata, cufftComplex *odata, int direction)\n" +
		"fn 12011 cufftMakePlanMany64 cufftResult (cufftHandle plan, int rank, long long int *n, size_t *workSize)\n" +
		"fn 12012 cufftSetStream cufftResult (cufftHandle plan, cudaStream_t stream)\n" +
		"fn 12013 cufftSolveHost cufftResult (cufftHandle plan, int n, const double *b, double *x, void *scratch, size_t scratchBytes)\n" +
		"type i32 cufftHandle\ntype struct cufftComplex\ntype i32 int\ntype i64 long long int\ntype u64 size_t\ntype handle cudaStream_t\n"
	for _, c := range []struct{ ann, want string }{
		{"remote cufftExecC2C o:plan d d", "3 kinds for 4 parameters"},
		{"remote cufftExecC2C o:plan v d v", "value kind"},
		{"remote cufftExecC2C o:plan d d d", "address kind"},
		{"remote cufftExecC2C o:plan d d q", "unknown kind"},
		{"remote cufftMakePlanMany64 o:plan v h:size*8 r", "host length names no parameter"},
		{"remote cufftMakePlanMany64 o:plan v h:rank*8 r async", "async with outputs"},
		{"remote cufftSetStream o:plan d", "address kind"}, // a stream is s: the worker's handle of it
		{"remote cufftSetStream o:plan s", ""},
		{"remote cufftSetStream o:plan v", "value kind"},
		{"remote cufftPlanNothing v", "not in cufft.txt"},
		// staged host arrays: read (I) or written (H), never a const one written; host scratch.
		{"remote cufftSolveHost o:plan v I:n*8 H:n+1*8 w:scratchBytes v", ""},
		{"remote cufftSolveHost o:plan v H:n*8 H:n*8 w:scratchBytes v", "const is read only"},
		{"remote cufftSolveHost o:plan v I:m*8 H:n*8 w:scratchBytes v", "host array length names no parameter"},
		{"remote cufftSolveHost o:plan v I:n*8 H:n*8 w:bytes v", "host scratch size names no parameter"},
		{"remote cufftSolveHost o:plan v I:n*8 H:n*8 w:scratchBytes v async", "async with outputs"},
		{"remote cufftSolveHost o?:plan v I:n*8 v w:scratchBytes v", "value kind"},
	} {
		root := t.TempDir()
		d := filepath.Join(root, "gpuserverd/apigen/desc")
		for _, dir := range []string{d, filepath.Join(root, "gpuserverd/guest/cufft")} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "cufft.txt"), []byte(desc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cufft.ann"), []byte(c.ann+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := libFuncs(root, mathLibs[1])
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.ann, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: got %v, want an error saying %q", c.ann, err, c.want)
		}
	}
}

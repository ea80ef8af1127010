package main

import (
	"os"
	"strings"
	"testing"
)

func TestSplitParams(t *testing.T) {
	got := splitParams("int *minGridSize, CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t (*cb)(int, int), const void *const *p, unsigned int flags")
	want := []param{{"int *", "minGridSize", 0}, {"CUfunction", "func", 0}, {"CUoccupancyB2DSize", "blockSizeToDynamicSMemSize", 0},
		{"size_t (*cb)(int, int)", "cb", 0}, {"const void * const *", "p", 0}, {"unsigned int", "flags", 0}}
	if len(got) != len(want) {
		t.Fatalf("got %d params %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("param %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if p := splitParams(""); len(p) != 0 {
		t.Errorf("empty list: %v", p)
	}
}

func TestClassify(t *testing.T) {
	types := map[string]string{"int": "i32", "CUdevice": "i32", "CUfunction": "handle", "CUstream": "handle",
		"CUdeviceptr": "u64", "size_t": "u64", "CUmodule": "handle", "CUDA_MEMCPY2D": "struct", "char": "i8",
		"CUfunc_cache": "enum"}
	for _, c := range []struct {
		params, why string
		kinds       []argKind
	}{
		{"int *can, CUdevice dev, CUdevice peer", "", []argKind{argOut, argDevice, argDevice}},
		{"CUfunction f, CUfunc_cache c", "", []argKind{argFunction, argValue}},
		{"CUstream s, size_t *out", "", []argKind{argStream, argOut}},
		{"CUdeviceptr p", "device address", nil},
		{"CUmodule m", "CUmodule", nil},
		{"const CUDA_MEMCPY2D *p", "pointer to CUDA_MEMCPY2D", nil},
		{"char *name, int len", "pointer to char", nil},
		{"CUdevice *d", "pointer to CUdevice", nil},
		{"const int *in", "pointer to int", nil},
	} {
		args, why := classify(&fn{name: "cuX", params: c.params}, types)
		if c.why != "" {
			if !strings.Contains(why, c.why) || args != nil {
				t.Errorf("%s: got %v %q, want refusal naming %q", c.params, args, why, c.why)
			}
			continue
		}
		if why != "" || len(args) != len(c.kinds) {
			t.Fatalf("%s: got %v %q", c.params, args, why)
		}
		for i, k := range c.kinds {
			if args[i].kind != k {
				t.Errorf("%s: param %d is %s, want %s", c.params, i, args[i].kind, k)
			}
		}
	}
}

// TestDescriptionRoundTrip: the committed description parses, its ids lie in the driver's range
// and are unique, and formatting it again gives the same text.
func TestDescriptionRoundTrip(t *testing.T) {
	data, err := os.ReadFile("desc/driver.txt")
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDesc(data)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, f := range d.fns {
		if f.id < driverFirstFn || f.id > driverLastFn {
			t.Errorf("%s: id %d outside %d-%d", f.name, f.id, driverFirstFn, driverLastFn)
		}
		if other, ok := seen[f.id]; ok {
			t.Errorf("id %d: both %s and %s", f.id, other, f.name)
		}
		seen[f.id] = f.name
	}
	if got := string(d.format("cuda.h")); got != string(data) {
		t.Error("formatting the parsed description changes it")
	}
}

func TestAssignIDsKeepsOld(t *testing.T) {
	old := &desc{fns: []fn{{id: 1002, name: "cuB"}, {id: 1005, name: "cuGone"}}}
	d := &desc{fns: []fn{{name: "cuA", ret: "CUresult"}, {name: "cuB", ret: "CUresult"}, {name: "cuAlloc", ret: "void*"}}}
	assignIDs(d, old, driverFirstFn, "CUresult")
	if d.fns[1].id != 1002 || d.fns[0].id != 1006 {
		t.Errorf("ids %d, %d: want a kept 1002 and a new 1006 (past every old id)", d.fns[0].id, d.fns[1].id)
	}
	if d.fns[2].id != 0 {
		t.Errorf("a function returning no status got id %d, want none (hand-written)", d.fns[2].id)
	}
}

func TestParseDescErrors(t *testing.T) {
	for _, in := range []string{"fn x cuA CUresult ()", "fn 1002 cuA", "alias cuA", "type enum", "bogus 1", "struct S i32", "struct S i32:x:0", "host nppiA"} {
		if _, err := parseDesc([]byte(in + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: got %v, want an error naming line 1", in, err)
		}
	}
}

func FuzzParseDesc(f *testing.F) {
	f.Add([]byte("fn 1002 cuA CUresult (int *a, CUdevice d)\nalias cuB cuB_v2\ntype i32 int\n"))
	f.Add([]byte("fn 70000 cuA CUresult (\n"))
	f.Add([]byte("fn 15500001 nppiA NppStatus (const Npp8u aV[3], NppiSize oSize, NppStreamContext c)\ntype struct NppiSize\n" +
		"type struct NppStreamContext\ntype u8 Npp8u\nstruct NppiSize i32:width i32:height\nstruct NppStreamContext ptr:hStream i32:a:2\nhost nppiA aV\n"))
	f.Add([]byte("struct A B:x\nstruct B A:y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseDesc(data)
		if err != nil {
			return
		}
		for _, fn := range d.fns {
			ps := splitParams(fn.params) // must not panic on any accepted list
			nppKinds(libFn{fn: fn, params: ps}, d)
		}
		for name := range d.structs {
			structLayout(d, name) // terminates: no struct contains itself
		}
	})
}

// TestNeedHandRefusesStubs: a name whose return type is not an error code fails generation until it
// is hand-written, so no int-returning stub ever stands for cudaCreateChannelDesc and its kind.
func TestNeedHandRefusesStubs(t *testing.T) {
	ann := &annotations{hand: map[string]string{"cudaCreateChannelDesc": "returns a struct"}}
	stubbed := []verdict{{name: "cudaCreateChannelDesc"}, {name: "cudaMalloc", hand: true}}
	err := needHand(stubbed, ann, "runtime.ann")
	if err == nil || !strings.Contains(err.Error(), "cudaCreateChannelDesc") {
		t.Fatalf("a stubbed struct-returning function: err = %v, want it named", err)
	}
	written := []verdict{{name: "cudaCreateChannelDesc", hand: true}}
	if err := needHand(written, ann, "runtime.ann"); err != nil {
		t.Fatalf("hand-written: %v", err)
	}
	if err := needHand(nil, ann, "runtime.ann"); err == nil {
		t.Fatal("an annotated name that is not exported must fail too")
	}
}

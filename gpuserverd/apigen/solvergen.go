package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// cuSOLVER's dense API (libcusolver.so.12) from desc/cusolverdn.txt and desc/cusolver.ann: every
// function is exported by gpucloud's guest libcusolver; those whose parameters the generic path
// can carry (values, device addresses, the session's objects, a stream, host outputs and host
// scratch named in the annotations) are remoted as a SolverCall of their wire id.

// solverAnn is desc/cusolver.ann.
type solverAnn struct {
	hostOut   map[string]bool
	hostArray map[string]string // param -> its count parameter
	hostWork  map[string]string // param -> its size parameter
	destroy   map[string]bool
	hand      map[string]string
	refuse    map[string]string
}

func readSolverAnn(path string) (*solverAnn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &solverAnn{hostOut: map[string]bool{}, hostArray: map[string]string{}, hostWork: map[string]string{},
		destroy: map[string]bool{}, hand: map[string]string{}, refuse: map[string]string{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		w := strings.Fields(l)
		bad := fmt.Errorf("%s line %d: %q", path, n, l)
		switch {
		case w[0] == "hostout" && len(w) == 2:
			a.hostOut[w[1]] = true
		case w[0] == "hostarray" && len(w) == 3:
			a.hostArray[w[1]] = w[2]
		case w[0] == "hostwork" && len(w) == 3:
			a.hostWork[w[1]] = w[2]
		case w[0] == "destroy" && len(w) == 2:
			a.destroy[w[1]] = true
		case w[0] == "hand" && len(w) > 2:
			a.hand[w[1]] = strings.Join(w[2:], " ")
		case w[0] == "refuse" && len(w) > 2:
			a.refuse[w[1]] = strings.Join(w[2:], " ")
		default:
			return nil, bad
		}
	}
	return a, sc.Err()
}

// solverObjects are the object types the worker keeps by id, with their backend.SolverObj* kind.
var solverObjects = map[string]string{
	"cusolverDnHandle_t": "SolverObjHandle", "cusolverDnParams_t": "SolverObjParams",
	"syevjInfo_t": "SolverObjSyevj", "gesvdjInfo_t": "SolverObjGesvdj",
}

// solverScalar is the C type a value parameter travels as, by its class; "" for none.
func solverScalar(class string) (ctype string, size int) {
	switch class {
	case "i32", "enum":
		return "int", 4
	case "u32":
		return "unsigned", 4
	case "i8":
		return "signed char", 1
	case "i64":
		return "int64_t", 8
	case "u64":
		return "uint64_t", 8
	case "f32":
		return "float", 4
	case "f64":
		return "double", 8
	}
	return "", 0
}

// solverClass resolves the classes extract leaves unknown (standard C types).
func solverClass(types map[string]string, t string) string {
	switch t {
	case "int64_t", "long long int", "long long":
		return "i64"
	case "signed char":
		return "i8"
	}
	return types[t]
}

// sArg is one parameter's verdict: the backend.SolverArg it becomes and how C passes it.
type sArg struct {
	p    param
	kind string // backend.SolverArgKind name
	obj  string // backend.SolverObj* name
	// nullable: a cusolverDnParams_t after the first parameter may be NULL, NVIDIA's default
	// algorithms (PyTorch passes NULL params to Xgeqrf and Xsyevd); a NULL object that a
	// function works on (its first parameter) stays refused.
	nullable bool
	size     int
	ref      int
	carry    string // the C type of the backend's call: int, int64_t, float, void * ...
}

type solverVerdict struct {
	f       fn
	args    []sArg
	remote  bool
	hand    bool
	reason  string
	async   bool
	destroy bool
}

func solverDecide(d *desc, ann *solverAnn) []solverVerdict {
	var out []solverVerdict
	for _, f := range d.fns {
		v := solverVerdict{f: f, destroy: ann.destroy[f.name]}
		switch {
		case ann.hand[f.name] != "":
			// Written by hand in the guest; still on the wire when its parameters can travel.
			v.hand, v.reason = true, "hand-written: "+ann.hand[f.name]
			var why string
			v.args, why = solverArgs(f, d.types, ann)
			v.remote = why == ""
		case ann.refuse[f.name] != "":
			v.reason = ann.refuse[f.name]
		default:
			v.args, v.reason = solverArgs(f, d.types, ann)
			v.remote = v.reason == ""
		}
		if v.remote {
			v.async = !v.destroy
			for _, a := range v.args {
				if a.kind == "SolverNew" || a.kind == "SolverOut" || a.kind == "SolverOutArray" {
					v.async = false
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// solverArgs classifies f's parameters; a reason when one cannot travel.
func solverArgs(f fn, types map[string]string, ann *solverAnn) ([]sArg, string) {
	ps := splitParams(f.params)
	index := map[string]int{}
	for i, p := range ps {
		index[p.name] = i
	}
	var args []sArg
	for _, p := range ps {
		t, ptr := baseType(p.ctype), pointers(p.ctype)
		class := solverClass(types, t)
		a := sArg{p: p, carry: "void *"}
		switch {
		case ptr == 0 && solverObjects[t] != "":
			a.kind, a.obj = "SolverObject", solverObjects[t]
			a.nullable = t == "cusolverDnParams_t" && len(args) > 0
		case ptr == 0 && t == "cudaStream_t":
			a.kind = "SolverStream"
		case ptr == 0 && class == "f32":
			a.kind, a.carry = "SolverFloat", "float"
		case ptr == 0 && class == "f64":
			a.kind, a.carry = "SolverDouble", "double"
		case ptr == 0:
			c, _ := solverScalar(class)
			if c == "" {
				return nil, fmt.Sprintf("parameter %s is a %s (%s) by value", p.name, t, class)
			}
			a.kind, a.carry = "SolverValue", c
		case ann.hostOut[p.name]:
			_, size := solverScalar(class)
			if size == 0 || ptr != 1 {
				return nil, fmt.Sprintf("host output %s is a %s", p.name, p.ctype)
			}
			a.kind, a.size = "SolverOut", size
		case ann.hostArray[p.name] != "":
			ref, ok := index[ann.hostArray[p.name]]
			if _, size := solverScalar(class); !ok || size != 8 {
				return nil, fmt.Sprintf("host array %s: no count parameter %s or not 8-byte elements", p.name, ann.hostArray[p.name])
			}
			a.kind, a.size, a.ref = "SolverOutArray", 8, ref
		case ann.hostWork[p.name] != "":
			ref, ok := index[ann.hostWork[p.name]]
			if !ok {
				return nil, fmt.Sprintf("host scratch %s: no size parameter %s", p.name, ann.hostWork[p.name])
			}
			a.kind, a.ref = "SolverHostWork", ref
		case ptr == 1 && solverObjects[t] != "":
			a.kind, a.obj = "SolverNew", solverObjects[t]
		case class == "handle" || class == "fnptr" || class == "struct" && t != "cuComplex" && t != "cuDoubleComplex" ||
			t == "char" || t == "void" && ptr > 1:
			return nil, fmt.Sprintf("parameter %s is a %s in host memory", p.name, p.ctype)
		default:
			a.kind = "SolverDevice"
		}
		args = append(args, a)
	}
	for _, a := range args {
		if (a.kind == "SolverOutArray" || a.kind == "SolverHostWork") && args[a.ref].kind != "SolverValue" {
			return nil, fmt.Sprintf("%s's size parameter is not a value", a.p.name)
		}
	}
	return args, ""
}

// generateSolver writes cuSOLVER's generated files (see the top of this file) into files.
func generateSolver(root string, files map[string][]byte) error {
	descDir := filepath.Join(root, "gpuserverd/apigen/desc")
	d, err := readDesc(filepath.Join(descDir, "cusolverdn.txt"))
	if err != nil {
		return err
	}
	ann, err := readSolverAnn(filepath.Join(descDir, "cusolver.ann"))
	if err != nil {
		return err
	}
	for _, f := range d.fns {
		if f.id < solverFirstFn || f.id > solverLastFn {
			return fmt.Errorf("cusolverdn.txt: %s has wire id %d outside %d-%d", f.name, f.id, solverFirstFn, solverLastFn)
		}
	}
	vs := solverDecide(d, ann)
	table, err := solverTable(vs)
	if err != nil {
		return err
	}
	files["gpuserverd/backend/solvercalls_gen.go"] = table
	files["gpuserverd/backend/cuda/solvercalls_gen.c"] = solverBackendC(vs)
	files["gpuserverd/guest/cusolver/api_gen.c"] = solverGuestC(vs)
	files["gpuserverd/guest/cusolver/cusolver_gen.h"] = solverGuestTypes(d)
	files["docs/cusolver-coverage.md"] = solverCoverage(vs)
	return nil
}

func solverTable(vs []solverVerdict) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by gpuserverd/apigen from apigen/desc/cusolverdn.txt and cusolver.ann; DO NOT EDIT.\n\npackage backend\n\n")
	b.WriteString("// SolverFuncs are the remoted functions of cuSOLVER's dense API by wire id.\nvar SolverFuncs = map[uint32]SolverFunc{\n")
	for _, v := range vs {
		if !v.remote {
			continue
		}
		fmt.Fprintf(&b, "%d: {ID: %d, Name: %q, Destroy: %v, Args: []SolverArg{", v.f.id, v.f.id, v.f.name, v.destroy)
		for _, a := range v.args {
			b.WriteString("{Kind: " + a.kind)
			if a.obj != "" {
				b.WriteString(", Obj: " + a.obj)
			}
			if a.nullable {
				b.WriteString(", Nullable: true")
			}
			if a.size != 0 {
				fmt.Fprintf(&b, ", Size: %d", a.size)
			}
			if a.kind == "SolverOutArray" || a.kind == "SolverHostWork" {
				fmt.Fprintf(&b, ", Ref: %d", a.ref)
			}
			b.WriteString("}, ")
		}
		b.WriteString("}},\n")
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// solverBackendC is the real backend's typed call of each remoted function: the words as the
// backend prepared them (objects, streams and outputs already NVIDIA's pointers) cast to each
// parameter's C type, so the call follows the platform's ABI exactly.
func solverBackendC(vs []solverVerdict) []byte {
	var b bytes.Buffer
	b.WriteString(cHeader)
	b.WriteString("#include \"solver.h\"\n\n#include <string.h>\n\n")
	b.WriteString("static float f32(uint64_t w) {\n\tuint32_t u = (uint32_t)w;\n\tfloat f;\n\tmemcpy(&f, &u, 4);\n\treturn f;\n}\n\n")
	b.WriteString("static double f64(uint64_t w) {\n\tdouble d;\n\tmemcpy(&d, &w, 8);\n\treturn d;\n}\n\n")
	b.WriteString("const char *gc_solver_name(uint32_t fn) {\n\tswitch (fn) {\n")
	for _, v := range vs {
		if v.remote {
			fmt.Fprintf(&b, "\tcase %d: return \"%s\";\n", v.f.id, v.f.name)
		}
	}
	b.WriteString("\t}\n\treturn NULL;\n}\n\n")
	b.WriteString("int gc_solver_invoke(uint32_t fn, void *f, const uint64_t *a) {\n\tswitch (fn) {\n")
	for _, v := range vs {
		if !v.remote {
			continue
		}
		var types, vals []string
		for i, a := range v.args {
			types = append(types, a.carry)
			switch a.carry {
			case "float":
				vals = append(vals, fmt.Sprintf("f32(a[%d])", i))
			case "double":
				vals = append(vals, fmt.Sprintf("f64(a[%d])", i))
			case "void *":
				vals = append(vals, fmt.Sprintf("(void *)(uintptr_t)a[%d]", i))
			default:
				vals = append(vals, fmt.Sprintf("(%s)(int64_t)a[%d]", a.carry, i))
			}
		}
		if len(types) == 0 {
			types = []string{"void"}
		}
		fmt.Fprintf(&b, "\tcase %d: /* %s */\n\t\treturn ((int (*)(%s))f)(%s);\n", v.f.id, v.f.name,
			strings.Join(types, ", "), strings.Join(vals, ", "))
	}
	b.WriteString("\t}\n\treturn CUSOLVER_STATUS_NOT_SUPPORTED;\n}\n")
	return b.Bytes()
}

// solverGuestTypes declares the types and functions of cusolverDn.h as gpucloud's guest library
// needs them (no NVIDIA header in the build): enums as int, objects as opaque pointers.
func solverGuestTypes(d *desc) []byte {
	var b bytes.Buffer
	b.WriteString(cHeader)
	b.WriteString("#ifndef GPUCLOUD_CUSOLVER_GEN_H\n#define GPUCLOUD_CUSOLVER_GEN_H\n\n#include <cuda.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\n")
	b.WriteString("typedef int cusolverStatus_t;\n")
	names := make([]string, 0, len(d.types))
	for t := range d.types {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		switch c := d.types[t]; {
		case t == "cudaStream_t":
			b.WriteString("typedef CUstream cudaStream_t;\n")
		case c == "handle":
			fmt.Fprintf(&b, "typedef struct %s_st *%s;\n", t, t)
		case c == "enum":
			fmt.Fprintf(&b, "typedef int %s;\n", t)
		case t == "cusolver_int_t":
			b.WriteString("typedef int cusolver_int_t;\n")
		case t == "cuComplex":
			b.WriteString("typedef struct { float x, y; } cuComplex;\n")
		case t == "cuDoubleComplex":
			b.WriteString("typedef struct { double x, y; } cuDoubleComplex;\n")
		case c == "fnptr":
			fmt.Fprintf(&b, "typedef void (*%s)(int logLevel, const char *functionName, const char *message);\n", t)
		}
	}
	b.WriteString("\n/* Every function of cusolverDn.h, as api_gen.c and solver.c define it. */\n")
	for _, f := range d.fns {
		params := f.params
		if params == "" {
			params = "void"
		}
		fmt.Fprintf(&b, "cusolverStatus_t %s(%s);\n", f.name, params)
	}
	b.WriteString("\n#endif\n")
	return b.Bytes()
}

// solverGuestC is each exported function of the guest library: the remoted ones pack their
// parameters into words and call gc_solver_call (solver.c); the others answer
// CUSOLVER_STATUS_NOT_SUPPORTED with a one-time notice.
func solverGuestC(vs []solverVerdict) []byte {
	var b bytes.Buffer
	b.WriteString(cHeader)
	b.WriteString("#include \"solver.h\"\n\n/* A refused function's parameters go unread. */\n#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n\n")
	for _, v := range vs {
		if v.hand {
			continue
		}
		params := v.f.params
		if params == "" {
			params = "void"
		}
		fmt.Fprintf(&b, "GC_EXPORT cusolverStatus_t %s(%s) {\n", v.f.name, params)
		if !v.remote {
			fmt.Fprintf(&b, "\tstatic int gc_said;\n\treturn gc_solver_refuse(&gc_said, \"%s\", \"%s\");\n}\n\n", v.f.name, cEscape(v.reason))
			continue
		}
		var kinds, words, outs []string
		for _, a := range v.args {
			kinds = append(kinds, fmt.Sprintf("{GC_%s, %d, %d, %d}", strings.ToUpper(strings.TrimPrefix(a.kind, "Solver")), a.size, a.ref, boolInt(a.nullable)))
			n := a.p.name
			out := "NULL"
			switch a.kind {
			case "SolverObject", "SolverDevice":
				words = append(words, fmt.Sprintf("(uint64_t)(uintptr_t)%s", n))
			case "SolverStream":
				words = append(words, fmt.Sprintf("gc_solver_stream(%s)", n))
			case "SolverFloat":
				words = append(words, fmt.Sprintf("gc_solver_f32(%s)", n))
			case "SolverDouble":
				words = append(words, fmt.Sprintf("gc_solver_f64(%s)", n))
			case "SolverValue":
				words = append(words, fmt.Sprintf("(uint64_t)(int64_t)%s", n))
			default: // outputs and host scratch: 1 when the pointer is set
				words = append(words, fmt.Sprintf("%s != NULL", n))
				if a.kind != "SolverHostWork" {
					out = "(void *)" + n
				}
			}
			outs = append(outs, out)
		}
		fmt.Fprintf(&b, "\tstatic const struct gc_solver_arg gc_k[] = {%s};\n", strings.Join(kinds, ", "))
		fmt.Fprintf(&b, "\tuint64_t gc_w[] = {%s};\n", strings.Join(words, ", "))
		fmt.Fprintf(&b, "\tvoid *gc_o[] = {%s};\n", strings.Join(outs, ", "))
		fmt.Fprintf(&b, "\tstatic const struct gc_solver_fn gc_f = {%d, \"%s\", %d, %d, %d, gc_k};\n", v.f.id, v.f.name,
			len(v.args), boolInt(v.async), boolInt(v.destroy))
		b.WriteString("\treturn gc_solver_call(&gc_f, gc_w, gc_o);\n}\n\n")
	}
	return b.Bytes()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cEscape(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

func solverCoverage(vs []solverVerdict) []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Generated by gpuserverd/apigen (`go generate ./gpuserverd/apigen`); do not edit. -->\n# cuSOLVER coverage\n\n")
	remote, async := 0, 0
	for _, v := range vs {
		if v.remote || v.hand {
			remote++
		}
		if v.async {
			async++
		}
	}
	fmt.Fprintf(&b, "Every function of NVIDIA's `cusolverDn.h` (CUDA 13), exported by gpucloud's guest `libcusolver.so.12`\n"+
		"(`gpuserverd/guest/cusolver`, symbol version `libcusolver.so.12`): %d names, %d remoted (%d of them sent\n"+
		"without waiting for the reply, like a kernel launch: their errors surface at the next synchronising call),\n"+
		"%d refused (`CUSOLVER_STATUS_NOT_SUPPORTED`, with a one-time notice on stderr naming the call). A remoted\n"+
		"call is a `SolverCall` of its wire id; the worker runs it with NVIDIA's `libcusolver.so.12` on the GPU server.\n"+
		"Handles, params and syevj/gesvdj infos are ids of the session's worker; matrices, workspaces, pivots and\n"+
		"devInfo are the session's device memory.\n\n", len(vs), remote, async, len(vs)-remote)
	b.WriteString("| Function | Status | Why |\n|---|---|---|\n")
	for _, v := range vs {
		status, why := "refused", v.reason
		switch {
		case v.hand:
			status = "remoted"
			if !v.remote {
				why += " (answered in the guest)"
			}
		case v.remote:
			status, why = "remoted", fmt.Sprintf("generated (wire id %d)", v.f.id)
			if v.async {
				why += ", sent without waiting"
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.f.name, status, why)
	}
	return b.Bytes()
}

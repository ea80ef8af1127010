package main

import (
	"bytes"
	"fmt"
	"go/format"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// libFn is one function of a math library and what its annotation says.
type libFn struct {
	fn
	params []param
	kinds  []string // one per parameter (remoted only)
	remote bool
	async  bool
	reason string // why it is refused (annotation), or the default
	hand   string // the hand-written file that defines it instead
}

// libAnn is a math library's annotation file (desc/<lib>.ann).
type libAnn struct {
	remote map[string][]string // name -> kinds (and a trailing "async")
	refuse map[string]string
}

func readLibAnn(path string) (*libAnn, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	a := &libAnn{remote: map[string][]string{}, refuse: map[string]string{}}
	for i, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "remote":
			a.remote[f[1]] = f[2:]
		case len(f) >= 3 && f[0] == "refuse":
			a.refuse[f[1]] = strings.Join(f[2:], " ")
		default:
			return nil, fmt.Errorf("%s: line %d: want \"remote <name> <kinds>\" or \"refuse <name> <reason>\": %q", path, i+1, l)
		}
	}
	return a, nil
}

// kindRe: a value, device address, stream, output, scalar; a reserved host pointer that must be
// NULL (z); an output that is a host workspace's size (R: the session's host scratch grows to it);
// a value or output the session remembers by name (v>name, r>name); an object (o, or o? that may
// be NULL; lib.kind names another library's), a new one, one destroyed; a small host input in the
// call (h); a host array staged through device memory, read (I) or read and written (H), of
// count[+k]*unit bytes, the count a parameter, a remembered $name or a number; host scratch (w) of a
// parameter's size, or of the largest R the session saw.
var kindRe = regexp.MustCompile(`^(v|d|s|r|a|z|R|[bc]:[1-9][0-9]*|[vr]>\w+|(o\?|[onx]):[a-z.]+|h:\w+\*[1-9][0-9]*|[HI]:\$?\w+(\+[0-9]+)?\*[1-9][0-9]*|w(:\w+)?)$`)

// stagedLen splits a staged array's kind (H:count+k*unit) into the count's parameter, k and unit.
func stagedLen(k string) (count, plus, unit string) {
	e, unit, _ := strings.Cut(k[2:], "*")
	e = strings.TrimPrefix(e, "$")
	count, plus, _ = strings.Cut(e, "+")
	if plus == "" {
		plus = "0"
	}
	return count, plus, unit
}

// libFuncs decides each function of lib's description: remoted by its annotation (the kinds
// checked against the prototype), hand-written in the guest folder, or refused.
func libFuncs(root string, lib mathLib) ([]libFn, error) {
	descDir := filepath.Join(root, "gpuserverd/apigen/desc")
	d, err := readDesc(filepath.Join(descDir, lib.name+".txt"))
	if err != nil {
		return nil, err
	}
	annName := lib.name
	if lib.npp {
		annName = "npp" // one annotation file for NPP's libraries
	}
	ann, err := readLibAnn(filepath.Join(descDir, annName+".ann"))
	if err != nil {
		return nil, err
	}
	hand, err := handWritten(filepath.Join(root, "gpuserverd/guest", lib.dir()))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []libFn
	for _, f := range d.fns {
		seen[f.name] = true
		if (f.id < lib.firstID || f.id > lib.lastID) && f.ret == lib.ret {
			return nil, fmt.Errorf("%s.txt: %s has id %d outside %d-%d", lib.name, f.name, f.id, lib.firstID, lib.lastID)
		}
		lf := libFn{fn: f, params: splitParams(f.params), hand: hand[f.name]}
		kinds, ok := ann.remote[f.name]
		if n := len(kinds); n > 0 && kinds[n-1] == "async" {
			lf.async, kinds = true, kinds[:n-1]
		}
		switch {
		case f.ret != lib.ret: // NPP's allocators and version: no status to answer with
			if lf.hand == "" {
				return nil, fmt.Errorf("%s.txt: %s returns %s: hand-write it in guest/%s", lib.name, f.name, f.ret, lib.dir())
			}
			lf.reason = "hand-written"
		case ok:
			if len(kinds) != len(lf.params) {
				return nil, fmt.Errorf("%s.ann: %s has %d kinds for %d parameters", annName, f.name, len(kinds), len(lf.params))
			}
			for i, k := range kinds {
				if !kindRe.MatchString(k) {
					return nil, fmt.Errorf("%s.ann: %s: parameter %d: unknown kind %q", annName, f.name, i, k)
				}
				if err := checkKind(k, lf.params[i], lf.params, d.types); err != nil {
					return nil, fmt.Errorf("%s.ann: %s: parameter %s: %w", annName, f.name, lf.params[i].name, err)
				}
				if k[0] == 'b' || k[0] == 'c' { // a struct's bytes: as many as its recorded layout
					if n := structSize(d, baseType(lf.params[i].ctype)); k[2:] != strconv.Itoa(n) {
						return nil, fmt.Errorf("%s.ann: %s: parameter %s: %s, but %s has %d bytes", annName, f.name, lf.params[i].name, k, baseType(lf.params[i].ctype), n)
					}
				}
			}
			if lf.async && (hasLibOut(kinds) || hasStaged(kinds)) {
				return nil, fmt.Errorf("%s.ann: %s: async with outputs", annName, f.name)
			}
			lf.remote, lf.kinds = true, kinds
		case ann.refuse[f.name] != "":
			lf.reason = ann.refuse[f.name]
		case lib.npp:
			if kinds, why := nppKinds(lf, d); why != "" {
				lf.reason = "not remoted: " + why
			} else {
				lf.remote, lf.kinds = true, kinds
			}
		default:
			lf.reason = "not remoted yet"
		}
		out = append(out, lf)
	}
	for n := range ann.remote {
		if !seen[n] && !lib.npp { // NPP's annotations are checked against all its libraries (generateLibs)
			return nil, fmt.Errorf("%s.ann: %s is not in %s.txt", annName, n, lib.name)
		}
	}
	return out, nil
}

// checkKind refuses a kind that cannot be the parameter's type: pointers for addresses, outputs
// and host inputs; scalars for values.
func checkKind(k string, p param, all []param, types map[string]string) error {
	ptr := pointers(p.ctype) > 0
	class := types[baseType(p.ctype)]
	switch k[0] {
	case 'v':
		if ptr || !scalar(class) && class != "enum" {
			return fmt.Errorf("value kind for %q", p.ctype)
		}
	case 'd', 'a':
		if !ptr {
			return fmt.Errorf("address kind for %q", p.ctype)
		}
		if k == "a" && paramNamed(all, "computeType") < 0 {
			return fmt.Errorf("a scalar needs a computeType parameter")
		}
	case 'r', 'n':
		if !ptr {
			return fmt.Errorf("output kind for %q", p.ctype)
		}
	case 'h':
		if !ptr {
			return fmt.Errorf("host input kind for %q", p.ctype)
		}
		if n := strings.SplitN(k[2:], "*", 2)[0]; !isNumber(n) && paramNamed(all, n) < 0 {
			return fmt.Errorf("host length names no parameter")
		}
	case 'H', 'I':
		if !ptr {
			return fmt.Errorf("host array kind for %q", p.ctype)
		}
		if k[0] == 'H' && strings.HasPrefix(p.ctype, "const ") {
			return fmt.Errorf("a written host array (H) for %q: const is read only (I)", p.ctype)
		}
		if count, _, _ := stagedLen(k); k[2] != '$' && !isNumber(count) && paramNamed(all, count) < 0 {
			return fmt.Errorf("host array length names no parameter")
		}
	case 'w', 'z', 'R':
		if !ptr {
			return fmt.Errorf("host pointer kind for %q", p.ctype)
		}
		if k[0] == 'w' && len(k) > 1 && paramNamed(all, k[2:]) < 0 {
			return fmt.Errorf("host scratch size names no parameter")
		}
	case 'b', 'c':
		if ptr || class != "struct" {
			return fmt.Errorf("struct kind for %q", p.ctype)
		}
		if (k[0] == 'c') != (baseType(p.ctype) == "NppStreamContext") {
			return fmt.Errorf("a stream context (c) is NppStreamContext, got %q", p.ctype)
		}
	case 's':
		if baseType(p.ctype) != "cudaStream_t" {
			return fmt.Errorf("stream kind for %q", p.ctype)
		}
	}
	return nil
}

func paramNamed(ps []param, name string) int {
	for i, p := range ps {
		if p.name == name {
			return i
		}
	}
	return -1
}

func hasStaged(kinds []string) bool {
	for _, k := range kinds {
		if k[0] == 'H' || k[0] == 'I' {
			return true
		}
	}
	return false
}

func hasLibOut(kinds []string) bool {
	for _, k := range kinds {
		if isLibOut(k) {
			return true
		}
	}
	return false
}

// isLibOut: an output the reply carries (r, r>name, R, a new object).
func isLibOut(k string) bool { return k[0] == 'r' || k[0] == 'R' || k[0] == 'n' }

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// remembered is the name a v>name or r>name kind records.
func remembered(k string) string {
	if _, name, ok := strings.Cut(k, ">"); ok {
		return name
	}
	return ""
}

// cParam is a parameter as gpucloud's guest library declares it (no NVIDIA header): pointers and
// handles as void *, enums as int.
func cParam(p param, types map[string]string) string {
	if pointers(p.ctype) > 0 || strings.Contains(p.ctype, "(") {
		return "void *" + p.name
	}
	c := types[baseType(p.ctype)]
	if c == "enum" {
		return "int " + p.name
	}
	return ctype(c) + " " + p.name
}

// outWidth is the bytes an output parameter's pointee takes.
func outWidth(p param, types map[string]string) int {
	if pointers(p.ctype) > 1 {
		return 8
	}
	return classWidth(types[baseType(p.ctype)])
}

func guestLib(lib mathLib, fns []libFn, types map[string]string) []byte {
	if lib.npp {
		panic("NPP's guest files are nppGuestPart's")
	}
	var b bytes.Buffer
	b.WriteString(cHeader)
	fmt.Fprintf(&b, "/* gpucloud's %s: every function of NVIDIA's %s. A remoted one sends its words (backend.LibFunc's\n"+
		" * kinds) in one %s call; the rest answer %s once on stderr. All are weak: a\n"+
		" * hand-written definition in this folder wins, and may call the remoting one (gcr_<name>). */\n",
		lib.soname, lib.header, lib.message, lib.statusName)
	b.WriteString("#include \"internal.h\"\n\n#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n\n")
	vars := map[string]bool{}
	for _, f := range fns {
		for _, k := range f.kinds {
			if n := remembered(k); n != "" && !vars[n] {
				vars[n] = true
				fmt.Fprintf(&b, "/* a size the worker remembers too (desc/%s.ann: >%s, $%s) */\nstatic _Atomic int64_t gc_var_%s;\n", lib.name, n, n, n)
			}
		}
	}
	for _, f := range fns {
		if !f.remote {
			if f.hand == "" {
				fmt.Fprintf(&b, "GC_NOT_REMOTED_AS(%s, %s)\n", f.name, lib.status)
			}
			continue
		}
		var ps []string
		for _, p := range f.params {
			ps = append(ps, cParam(p, types))
		}
		sig := strings.Join(ps, ", ")
		if sig == "" {
			sig = "void"
		}
		var names []string
		for _, p := range f.params {
			names = append(names, p.name)
		}
		fmt.Fprintf(&b, "\nint gcr_%s(%s) {\n", f.name, sig)
		n := len(f.params)
		fmt.Fprintf(&b, "    uint64_t w[%d];\n    uint64_t out[GC_LIB_OUTS] = {0};\n    struct gc_host hb;\n    hb.len = 0;\n    (void)out;\n", max(n, 1))
		staged := hasStaged(f.kinds)
		if staged {
			b.WriteString("    struct gc_stage sg;\n    sg.n = 0;\n    int sst = gc_lib_ready();\n    if (sst != 0) return sst;\n")
		}
		handle := ""
		for i, k := range f.kinds {
			if k == "o:handle" && handle == "" {
				handle = f.params[i].name
			}
		}
		for i, k := range f.kinds {
			p := f.params[i]
			switch k[0] {
			case 'v':
				if n := remembered(k); n != "" {
					fmt.Fprintf(&b, "    gc_var_%s = (int64_t)%s;\n", n, p.name)
				}
				switch types[baseType(p.ctype)] {
				case "f32":
					fmt.Fprintf(&b, "    w[%d] = gc_f32_bits(%s);\n", i, p.name)
				case "f64":
					fmt.Fprintf(&b, "    w[%d] = gc_f64_bits(%s);\n", i, p.name)
				default:
					fmt.Fprintf(&b, "    w[%d] = (uint64_t)%s;\n", i, p.name)
				}
			case 'd':
				fmt.Fprintf(&b, "    w[%d] = (uint64_t)(uintptr_t)%s;\n", i, p.name)
			case 's':
				fmt.Fprintf(&b, "    w[%d] = gc_lib_stream(%s); /* the server's handle of the stream */\n", i, p.name)
			case 'o', 'x':
				if pointers(p.ctype) > 0 || types[baseType(p.ctype)] == "handle" {
					fmt.Fprintf(&b, "    w[%d] = (uint64_t)(uintptr_t)%s;\n", i, p.name)
				} else {
					fmt.Fprintf(&b, "    w[%d] = (uint64_t)(uint32_t)%s;\n", i, p.name)
				}
			case 'n':
				fmt.Fprintf(&b, "    if (!%s) return GC_LIB_INVALID;\n    w[%d] = 0;\n", p.name, i)
			case 'r', 'R':
				fmt.Fprintf(&b, "    w[%d] = gc_out_prior(%s, %d);\n", i, p.name, outWidth(p, types))
			case 'z':
				fmt.Fprintf(&b, "    if (%s) return GC_LIB_INVALID; /* reserved: NULL */\n    w[%d] = 0;\n", p.name, i)
			case 'h':
				e := strings.SplitN(k[2:], "*", 2)
				fmt.Fprintf(&b, "    if (gc_host_add(&hb, %s, (int64_t)%s, %s, &w[%d]) != 0) return GC_LIB_INVALID;\n", p.name, e[0], e[1], i)
			case 'a':
				fmt.Fprintf(&b, "    if (GC_SCALAR(%s, %s, computeType, &hb, &w[%d]) != 0) return GC_LIB_INVALID;\n", orZero(handle), p.name, i)
			case 'H', 'I':
				count, plus, unit := stagedLen(k)
				if k[2] == '$' {
					count = "gc_var_" + count
				}
				fmt.Fprintf(&b, "    if ((sst = gc_stage_add(&sg, (void *)%s, (int64_t)%s + %s, %s, %d, &w[%d])) != 0) {\n        gc_stage_done(&sg, 0);\n        return sst == GC_STAGE_NOMEM ? GC_LIB_ALLOC : GC_LIB_INVALID;\n    }\n",
					p.name, count, plus, unit, boolInt(k[0] == 'H'), i)
			case 'w':
				fmt.Fprintf(&b, "    w[%d] = %s != NULL; /* the worker's own scratch */\n", i, p.name)
			}
		}
		async := 0
		if f.async {
			async = 1
		}
		fmt.Fprintf(&b, "    int st = gc_lib_call(%d, w, %d, &hb, %d, out);\n", f.id, n, async)
		if staged {
			b.WriteString("    if (gc_stage_done(&sg, st == 0) != 0 && st == 0) st = GC_LIB_INVALID;\n")
		}
		b.WriteString("    if (st != 0) return st;\n")
		o := 0
		for i, k := range f.kinds {
			if isLibOut(k) {
				fmt.Fprintf(&b, "    gc_out_put(%s, %d, out[%d]);\n", f.params[i].name, outWidth(f.params[i], types), o)
				if n := remembered(k); n != "" {
					fmt.Fprintf(&b, "    gc_var_%s = (int64_t)out[%d];\n", n, o)
				}
				o++
			}
		}
		b.WriteString("    return 0;\n}\n")
		if f.hand == "" {
			fmt.Fprintf(&b, "GC_WEAK int %s(%s) { return gcr_%s(%s); }\n", f.name, sig, f.name, strings.Join(names, ", "))
		}
	}
	return b.Bytes()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// libTable is the Go table of every remoted function (backend.libFuncTable).
func libTable(all map[string][]libFn) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by gpuserverd/apigen from apigen/desc/*.ann; DO NOT EDIT.\n\npackage backend\n\n")
	b.WriteString("// libFuncTable lists the remoted functions of the math libraries: their kinds as desc/<lib>.ann writes them.\n")
	b.WriteString("var libFuncTable = []libFuncDesc{\n")
	for _, lib := range mathLibs {
		if lib.npp {
			continue // nppTable
		}
		for _, f := range all[lib.name] {
			if f.remote {
				var names []string
				for _, p := range f.params {
					names = append(names, p.name)
				}
				fmt.Fprintf(&b, "\t{%s, %d, %q, %q, %q, %v},\n", lib.goLib, f.id, f.name, strings.Join(f.kinds, " "), strings.Join(names, " "), f.async)
			}
		}
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// libDispatch is the real backend's calls into NVIDIA's libraries: one case per remoted function,
// its arguments cast from the words and host pointers backend/cuda/libcall.go prepared.
func libDispatch(all map[string][]libFn, types map[string]map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString("// Generated by gpuserverd/apigen from apigen/desc/ (`go generate ./gpuserverd/apigen`); do not edit.\n")
	b.WriteString("// Each case calls NVIDIA's function, found by name in its library on first use (a missing one is\n// GC_LIB_MISSING): a value as its C type, an address, stream or object as it came, host inputs and\n// scalars through p[i], outputs into o[i].\n")
	b.WriteString("#include \"libcall.h\"\n\n#include <string.h>\n\n")
	b.WriteString("static float f32(uint64_t w) { float f; uint32_t u = (uint32_t)w; memcpy(&f, &u, 4); return f; }\n")
	b.WriteString("static double f64(uint64_t w) { double d; memcpy(&d, &w, 8); return d; }\n\n")
	b.WriteString("int gc_lib_dispatch(int lib, int fn, const uint64_t *a, void *const *p, uint64_t *o) {\n\t(void)f32; (void)f64;\n\tswitch (fn) {\n")
	for li, lib := range mathLibs {
		if lib.npp {
			continue // nppDispatch, by signature
		}
		ty := types[lib.name]
		for _, f := range all[lib.name] {
			if !f.remote {
				continue
			}
			var pt, args []string
			for i, k := range f.kinds {
				prm := f.params[i]
				c := ty[baseType(prm.ctype)]
				isPtr := pointers(prm.ctype) > 0 || c == "handle"
				switch k[0] {
				case 'v', 'o', 'x':
					if isPtr {
						pt, args = append(pt, "void *"), append(args, fmt.Sprintf("(void *)(uintptr_t)a[%d]", i))
						continue
					}
					t := ctype(c)
					switch c {
					case "f32":
						args = append(args, fmt.Sprintf("f32(a[%d])", i))
					case "f64":
						args = append(args, fmt.Sprintf("f64(a[%d])", i))
					default:
						args = append(args, fmt.Sprintf("(%s)a[%d]", t, i))
					}
					pt = append(pt, t)
				case 'd', 's':
					pt, args = append(pt, "void *"), append(args, fmt.Sprintf("(void *)(uintptr_t)a[%d]", i))
				case 'r', 'R', 'n':
					pt, args = append(pt, "void *"), append(args, fmt.Sprintf("(void *)&o[%d]", i))
				case 'z':
					pt, args = append(pt, "void *"), append(args, "(void *)0")
				case 'h', 'a', 'H', 'I', 'w':
					pt, args = append(pt, "void *"), append(args, fmt.Sprintf("p[%d]", i))
				}
			}
			sig := strings.Join(pt, ", ")
			if sig == "" {
				sig = "void"
			}
			fmt.Fprintf(&b, "\tcase %d: { /* %s */\n\t\tstatic void *f;\n\t\tif (!f && !(f = gc_lib_sym(%d, %q))) return GC_LIB_MISSING;\n\t\treturn ((int (*)(%s))f)(%s);\n\t}\n",
				f.id, f.name, li, f.name, sig, strings.Join(args, ", "))
		}
	}
	b.WriteString("\t}\n\t(void)lib;\n\treturn GC_LIB_MISSING;\n}\n")
	return b.Bytes()
}

// libCoverage is docs/cuda-coverage.md's part for the math libraries.
func libCoverage(all map[string][]libFn) []byte {
	var b bytes.Buffer
	nppIntro := false
	for _, lib := range mathLibs {
		fns := all[lib.name]
		r := 0
		for _, f := range fns {
			if f.remote {
				r++
			}
		}
		heading := "##"
		if lib.npp {
			if !nppIntro {
				b.Write(nppCoverageIntro(all))
				nppIntro = true
			}
			heading = "###"
		}
		fmt.Fprintf(&b, heading+" %s (%s)\n\n%d functions of NVIDIA's `%s`: %d remoted through the generic %s call, %d hand-written or refused. Every one is exported.\n\n",
			lib.name, lib.soname, len(fns), strings.Join(append([]string{lib.header}, lib.more...), "`, `"), r, strings.ToUpper(lib.message[:1])+lib.message[1:]+"Call", len(fns)-r)
		b.WriteString("| Function | Status | Why |\n|---|---|---|\n")
		for _, f := range fns {
			status, why := "refused", f.reason
			switch {
			case f.remote:
				status, why = "remoted", "generated (id "+strconv.Itoa(f.id)+")"
				if f.async {
					why += ", sent without waiting"
				}
				if f.hand != "" {
					why += "; guest side in `" + f.hand + "`"
				}
			case f.hand != "":
				status, why = "hand-written", "`guest/"+lib.dir()+"/"+f.hand+"`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.name, status, why)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// generateLibs returns the math libraries' generated files.
func generateLibs(root string) (map[string][]byte, error) {
	all := map[string][]libFn{}
	types := map[string]map[string]string{}
	files := map[string][]byte{}
	nppStructs := map[string][]field{}
	for _, lib := range mathLibs {
		fns, err := libFuncs(root, lib)
		if err != nil {
			return nil, err
		}
		d, err := readDesc(filepath.Join(root, "gpuserverd/apigen/desc", lib.name+".txt"))
		if err != nil {
			return nil, err
		}
		all[lib.name], types[lib.name] = fns, d.types
		if lib.npp {
			for n, fs := range d.structs {
				nppStructs[n] = fs
			}
			continue
		}
		files["gpuserverd/guest/"+lib.name+"/calls_gen.c"] = guestLib(lib, fns, d.types)
	}
	if err := nppAnnotated(root, all); err != nil {
		return nil, err
	}
	sigs, sigOf := nppSigs(all, types)
	for _, lib := range mathLibs {
		if lib.npp {
			files["gpuserverd/guest/npp/"+lib.name+"_gen.c"] = nppGuestPart(lib, all[lib.name], sigOf)
		}
	}
	files["gpuserverd/guest/npp/sigs_gen.h"] = nppGuestSigs(sigs, nppStructs)
	files["gpuserverd/backend/cuda/nppcalls_gen.c"] = nppDispatch(sigs, nppStructs)
	nppTab, err := nppTable(all, sigOf)
	if err != nil {
		return nil, err
	}
	files["gpuserverd/backend/nppcalls_gen.go"] = nppTab
	table, err := libTable(all)
	if err != nil {
		return nil, err
	}
	files["gpuserverd/backend/libcalls_gen.go"] = table
	files["gpuserverd/backend/cuda/libcalls_gen.c"] = libDispatch(all, types)
	files["docs/cuda-coverage.md"] = libCoverage(all) // appended to the driver's and runtime's by generate
	return files, nil
}

package main

import (
	"bytes"
	"fmt"
	"go/format"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NPP's functions follow conventions its documentation states, so most need no annotation: a
// pointer is a device address (an image, a signal, a device scratch buffer, a device result) unless
// NVIDIA's documentation of the function says host (desc's host lines; hp* names); a fixed-size
// array (const Npp8u aConstants[3], Npp8u *pDst[3]) is host memory sent in the call; a struct by
// value (NppiSize, NppiPoint, NppiRect, complex values) travels as its bytes, and the
// NppStreamContext as its bytes with the stream mapped to the worker's. A host output is remoted
// only where it is one value (a buffer size: hp*Size); other host pointers need an annotation
// (desc/npp.ann), else the function is refused and says so.

// nppKinds decides an unannotated NPP function's kinds, or says why it is refused.
func nppKinds(f libFn, d *desc) ([]string, string) {
	host := map[string]bool{}
	for _, h := range d.host[f.name] {
		host[h] = true
	}
	var kinds []string
	for _, p := range f.params {
		base := baseType(p.ctype)
		class := d.types[base]
		ptrs := pointers(p.ctype)
		switch {
		case p.array != 0:
			if p.array < 0 || ptrs > 2 || ptrs == 2 && p.array > 16 {
				return nil, "array parameter " + p.name + " of no fixed size"
			}
			unit := 8 // an array of device pointers
			if ptrs == 1 {
				if !scalar(class) {
					return nil, "array parameter " + p.name + " of " + base
				}
				if !strings.HasPrefix(p.ctype, "const ") {
					return nil, "host output array " + p.name
				}
				unit = classWidth(class)
			}
			kinds = append(kinds, fmt.Sprintf("h:%d*%d", p.array, unit))
		case ptrs > 0:
			if host["?"] { // extract found no documentation for the function
				return nil, "pointer " + p.name + " of an undocumented function"
			}
			if !host[p.name] && !strings.HasPrefix(p.name, "hp") {
				kinds = append(kinds, "d")
				continue
			}
			if ptrs == 1 && scalar(class) && !strings.HasPrefix(p.ctype, "const ") && strings.HasPrefix(p.name, "hp") && strings.HasSuffix(p.name, "Size") {
				kinds = append(kinds, "r") // one value: a buffer's size
				continue
			}
			return nil, "host pointer " + p.name + " (not annotated in desc/npp.ann)"
		case base == "NppStreamContext":
			kinds = append(kinds, fmt.Sprintf("c:%d", structSize(d, base)))
		case class == "struct":
			if d.structs[base] == nil {
				return nil, "struct " + base + " by value without a recorded layout"
			}
			kinds = append(kinds, fmt.Sprintf("b:%d", structSize(d, base)))
		case scalar(class):
			kinds = append(kinds, "v")
		default:
			return nil, "parameter " + p.name + " of type " + p.ctype
		}
	}
	return kinds, ""
}

// classWidth is a scalar class's bytes.
func classWidth(class string) int {
	switch class {
	case "i8", "u8":
		return 1
	case "i16", "u16":
		return 2
	case "i32", "u32", "f32", "enum":
		return 4
	}
	return 8
}

// structLayout is the size and alignment of a recorded struct (x86-64 System V).
func structLayout(d *desc, name string) (size, align int) {
	align = 1
	for _, f := range d.structs[name] {
		s, a := 0, 0
		switch f.class {
		case "i8", "u8", "i16", "u16", "i32", "u32", "f32", "i64", "u64", "f64", "enum":
			s = classWidth(f.class)
			a = s
		case "ptr":
			s, a = 8, 8
		default:
			s, a = structLayout(d, f.class)
		}
		if f.count > 0 {
			s *= f.count
		}
		size = (size + a - 1) / a * a
		size += s
		align = max(align, a)
	}
	return (size + align - 1) / align * align, align
}

func structSize(d *desc, name string) int {
	s, _ := structLayout(d, name)
	return s
}

// cStructs declares the recorded structs for C, the inner ones first.
func cStructs(structs map[string][]field) string {
	var b strings.Builder
	done := map[string]bool{}
	var emit func(name string)
	emit = func(name string) {
		if done[name] {
			return
		}
		done[name] = true
		for _, f := range structs[name] {
			if _, ok := structs[f.class]; ok {
				emit(f.class)
			}
		}
		fmt.Fprintf(&b, "typedef struct {")
		for _, f := range structs[name] {
			t := f.class
			switch {
			case t == "ptr":
				t = "void *"
			case structs[t] == nil:
				t = ctype(t)
			}
			fmt.Fprintf(&b, " %s %s", t, f.name)
			if f.count > 0 {
				fmt.Fprintf(&b, "[%d]", f.count)
			}
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " } %s;\n", name)
	}
	names := make([]string, 0, len(structs))
	for n := range structs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		emit(n)
	}
	return b.String()
}

// nppSig is a remoted NPP function's shape as C passes it: per parameter its kind and C type.
type nppSig struct {
	kinds  []string
	ctypes []string
}

func (s nppSig) key() string { return strings.Join(s.kinds, ",") + "|" + strings.Join(s.ctypes, ",") }

func sigOf(f libFn, types map[string]string) nppSig {
	var s nppSig
	for i, k := range f.kinds {
		p := f.params[i]
		t := "void *"
		switch k[0] {
		case 'v':
			t = ctype(types[baseType(p.ctype)])
		case 'b', 'c':
			t = baseType(p.ctype)
			k = k[:1] + k[2:] // b8, c40
		case 'r':
			t = "void *"
			k = "r" + strconv.Itoa(outWidth(p, types))
		case 'h':
			k = k[:1] + k[2:] // h3*1
		case 'H', 'I': // the count as the macro's parameter (a<i>) or a number
			count, plus, unit := stagedLen(k)
			if !isNumber(count) {
				count = "a" + strconv.Itoa(paramNamed(f.params, count))
			}
			k = fmt.Sprintf("%c%s+%s*%s", k[0], count, plus, unit)
		}
		s.kinds = append(s.kinds, k)
		s.ctypes = append(s.ctypes, t)
	}
	return s
}

// nppSigs numbers the signatures of every remoted NPP function (from 1) and gives each function's.
func nppSigs(all map[string][]libFn, types map[string]map[string]string) ([]nppSig, map[string]int) {
	var sigs []nppSig
	byKey := map[string]int{}
	of := map[string]int{}
	for _, lib := range mathLibs {
		if !lib.npp {
			continue
		}
		for _, f := range all[lib.name] {
			if !f.remote {
				continue
			}
			s := sigOf(f, types[lib.name])
			n, ok := byKey[s.key()]
			if !ok {
				sigs = append(sigs, s)
				n = len(sigs)
				byKey[s.key()] = n
			}
			of[f.name] = n
		}
	}
	return sigs, of
}

// nppGuestSigs is guest/npp/sigs_gen.h: NPP's structs and one macro per signature that defines a
// remoting function of that shape (name, function id). A function only gathers its words and
// pointers; gc_npp_send (session.c) reads its kinds and makes the call, so 9,000 functions stay
// small.
func nppGuestSigs(sigs []nppSig, structs map[string][]field) []byte {
	var b bytes.Buffer
	b.WriteString(cHeader)
	b.WriteString("/* NPP's structs passed by value (their layouts from NVIDIA's nppdefs.h, desc/npp*.txt) and one\n" +
		" * macro per signature of the remoted functions: GC_NPP_S<n>(name, id) defines name, whose words\n" +
		" * and pointers gc_npp_send sends in one NppCall by the signature's kinds (backend.LibFunc's). */\n")
	b.WriteString("#ifndef GPUCLOUD_NPP_SIGS_GEN_H\n#define GPUCLOUD_NPP_SIGS_GEN_H\n\n")
	b.WriteString(cStructs(structs))
	for i, s := range sigs {
		var ps, ws, pp []string
		for j, t := range s.ctypes {
			ps = append(ps, fmt.Sprintf("%s a%d", t, j))
			w, p := "0", "0"
			switch k := s.kinds[j]; k[0] {
			case 'v':
				switch t {
				case "float":
					w = fmt.Sprintf("gc_f32_bits(a%d)", j)
				case "double":
					w = fmt.Sprintf("gc_f64_bits(a%d)", j)
				default:
					w = fmt.Sprintf("(uint64_t)a%d", j)
				}
			case 'd':
				w = fmt.Sprintf("(uint64_t)(uintptr_t)a%d", j)
			case 'b', 'c':
				p = fmt.Sprintf("&a%d", j)
			default: // r, h, H, I: the program's pointer
				p = fmt.Sprintf("a%d", j)
			}
			ws, pp = append(ws, w), append(pp, p)
		}
		n := len(s.kinds)
		fmt.Fprintf(&b, "\n#define GC_NPP_S%d(name, id) \\\n    GC_WEAK int name(%s) { \\\n", i+1, strings.Join(ps, ", "))
		fmt.Fprintf(&b, "        uint64_t w[%d] = {%s}; \\\n", max(n, 1), strings.Join(ws, ", "))
		fmt.Fprintf(&b, "        const void *p[%d] = {%s}; \\\n", max(n, 1), strings.Join(pp, ", "))
		fmt.Fprintf(&b, "        return gc_npp_send(id, %q, w, p, %d); \\\n    }\n", strings.Join(s.kinds, " "), n)
	}
	b.WriteString("\n#endif\n")
	return b.Bytes()
}

// nppGuestPart is guest/npp/<part>_gen.c: each function of one NPP library, remoted over its
// signature's macro or answering NPP_NOT_SUPPORTED_MODE_ERROR once.
func nppGuestPart(lib mathLib, fns []libFn, sigOf map[string]int) []byte {
	var b bytes.Buffer
	b.WriteString(cHeader)
	fmt.Fprintf(&b, "/* gpucloud's %s: every function of NVIDIA's %s returning NppStatus. A remoted one sends its\n"+
		" * words in one NppCall (sigs_gen.h); the rest answer %s once on stderr. All are weak:\n"+
		" * a hand-written definition in this folder wins. */\n", lib.soname, strings.Join(append([]string{lib.header}, lib.more...), ", "), lib.statusName)
	b.WriteString("#include \"internal.h\"\n#include \"sigs_gen.h\"\n\n")
	for _, f := range fns {
		switch {
		case f.ret != lib.ret: // hand-written (checked by libFuncs)
		case f.remote:
			fmt.Fprintf(&b, "GC_NPP_S%d(%s, %d)\n", sigOf[f.name], f.name, f.id)
		case f.hand == "":
			fmt.Fprintf(&b, "GC_NOT_REMOTED_AS(%s, %s)\n", f.name, lib.status)
		}
	}
	return b.Bytes()
}

// nppDispatch is backend/cuda/nppcalls_gen.c: NPP's structs and one call per signature of
// NVIDIA's function f (found by name by the caller), its arguments cast from the words and the
// host bytes backend/cuda/libcall.go prepared.
func nppDispatch(sigs []nppSig, structs map[string][]field) []byte {
	var b bytes.Buffer
	b.WriteString("// Generated by gpuserverd/apigen from apigen/desc/npp*.txt (`go generate ./gpuserverd/apigen`); do not edit.\n")
	b.WriteString("// NPP's remoted functions by signature: f is NVIDIA's function, a value as its C type, an address\n// as it came, a host array or a struct by value through p[i], an output into o[i].\n")
	b.WriteString("#include \"libcall.h\"\n\n#include <string.h>\n\n")
	b.WriteString(cStructs(structs))
	b.WriteString("\nstatic float nf32(uint64_t w) { float f; uint32_t u = (uint32_t)w; memcpy(&f, &u, 4); return f; }\n")
	b.WriteString("static double nf64(uint64_t w) { double d; memcpy(&d, &w, 8); return d; }\n\n")
	b.WriteString("int gc_npp_dispatch(int sig, void *f, const uint64_t *a, void *const *p, uint64_t *o) {\n\t(void)nf32; (void)nf64;\n\tswitch (sig) {\n")
	for i, s := range sigs {
		var args []string
		for j, k := range s.kinds {
			switch k[0] {
			case 'v':
				switch s.ctypes[j] {
				case "float":
					args = append(args, fmt.Sprintf("nf32(a[%d])", j))
				case "double":
					args = append(args, fmt.Sprintf("nf64(a[%d])", j))
				default:
					args = append(args, fmt.Sprintf("(%s)a[%d]", s.ctypes[j], j))
				}
			case 'd':
				args = append(args, fmt.Sprintf("(void *)(uintptr_t)a[%d]", j))
			case 'r':
				args = append(args, fmt.Sprintf("(void *)&o[%d]", j))
			case 'h', 'H', 'I':
				args = append(args, fmt.Sprintf("p[%d]", j))
			case 'b', 'c':
				args = append(args, fmt.Sprintf("*(const %s *)p[%d]", s.ctypes[j], j))
			}
		}
		sig := strings.Join(s.ctypes, ", ")
		if sig == "" {
			sig = "void"
		}
		fmt.Fprintf(&b, "\tcase %d:\n\t\treturn ((int (*)(%s))f)(%s);\n", i+1, sig, strings.Join(args, ", "))
	}
	b.WriteString("\t}\n\treturn GC_LIB_MISSING;\n}\n")
	return b.Bytes()
}

// nppAnnotated refuses an annotation (desc/npp.ann) naming no function of NPP's libraries.
func nppAnnotated(root string, all map[string][]libFn) error {
	ann, err := readLibAnn(filepath.Join(root, "gpuserverd/apigen/desc/npp.ann"))
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, lib := range mathLibs {
		if lib.npp {
			for _, f := range all[lib.name] {
				seen[f.name] = true
			}
		}
	}
	for _, names := range []map[string][]string{ann.remote} {
		for n := range names {
			if !seen[n] {
				return fmt.Errorf("npp.ann: %s is in none of NPP's descriptions", n)
			}
		}
	}
	for n := range ann.refuse {
		if !seen[n] {
			return fmt.Errorf("npp.ann: %s is in none of NPP's descriptions", n)
		}
	}
	return nil
}

// nppTable is backend/nppcalls_gen.go: every remoted NPP function, its kinds and its signature's
// number (backend/cuda's nppcalls_gen.c calls by it).
func nppTable(all map[string][]libFn, sigOf map[string]int) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by gpuserverd/apigen from apigen/desc/npp*.txt and npp.ann; DO NOT EDIT.\n\npackage backend\n\n")
	b.WriteString("// nppFuncTable lists NPP's remoted functions: id, name, kinds, parameter names, signature.\n")
	b.WriteString("var nppFuncTable = []nppFuncDesc{\n")
	for _, lib := range mathLibs {
		if !lib.npp {
			continue
		}
		for _, f := range all[lib.name] {
			if f.remote {
				var names []string
				for _, p := range f.params {
					names = append(names, p.name)
				}
				fmt.Fprintf(&b, "\t{%d, %q, %q, %q, %d},\n", f.id, f.name, strings.Join(f.kinds, " "), strings.Join(names, " "), sigOf[f.name])
			}
		}
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// nppCoverageIntro is docs/cuda-coverage.md's words on NPP before its libraries' tables.
func nppCoverageIntro(all map[string][]libFn) []byte {
	n, r := 0, 0
	for _, lib := range mathLibs {
		if lib.npp {
			for _, f := range all[lib.name] {
				n++
				if f.remote {
					r++
				}
			}
		}
	}
	return []byte(fmt.Sprintf("## NPP (libnppc.so.13 ... libnpps.so.13)\n\n"+
		"%d functions of NVIDIA's `npp.h` in its eleven libraries, each exported by gpucloud's library of the same soname "+
		"under NVIDIA's version node: %d remoted through the generic NppCall, the rest hand-written (the version, "+
		"the allocators) or refused with NPP_NOT_SUPPORTED_MODE_ERROR and a one-time notice. Most are decided by NPP's "+
		"conventions (`apigen/libs_npp.go`): a pointer is a device address unless NVIDIA's documentation of the function "+
		"says host; an `hp*Size` host pointer is one output value; a fixed-size array is a host input; a struct by value "+
		"travels as its bytes, the `NppStreamContext` with its stream mapped to the worker's. Host pointers the "+
		"conventions cannot size are remoted where `desc/npp.ann` says how, else refused (the reason below). "+
		"Calls wait for their reply (NPP answers argument errors at once).\n\n", n, r))
}

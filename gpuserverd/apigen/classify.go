package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// argKind is how the generic path carries one parameter (every one travels as a u64 on the wire).
type argKind string

const (
	argValue    argKind = "value"    // a scalar or enum passed by value
	argDevice   argKind = "device"   // a CUdevice: the session's ordinal, mapped by the worker
	argFunction argKind = "function" // a CUfunction: the server's handle
	argStream   argKind = "stream"   // a CUstream: the server's handle (0: the default stream)
	argEvent    argKind = "event"    // a CUevent: the server's handle
	argOut      argKind = "out"      // a pointer to one scalar the call writes (NULL travels as 0)
)

// genArg is one parameter of a generically remoted function.
type genArg struct {
	param
	kind  argKind
	class string // the scalar class (i32, u64, f32, enum...) of the value or of *out
}

// verdict is what becomes of one exported name.
type verdict struct {
	name    string
	fn      *fn      // its prototype, when the header has one
	remote  bool     // the generic path remotes it
	generic []genArg // its arguments then (none for a call without parameters)
	async   bool     // sent without waiting for the reply
	hand    bool     // a hand-written definition exists (it overrides the generated one)
	forward string   // a per-thread form generated as a call of this hand-written legacy form
	via     *fn      // a runtime function generated as a call of this driver function
	reason  string   // why it is refused (or, hand-written, where)
}

var handleKinds = map[string]argKind{"CUfunction": argFunction, "CUstream": argStream, "CUevent": argEvent}

// scalar reports whether a type class travels as a plain value.
func scalar(class string) bool {
	switch class {
	case "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "enum":
		return true
	}
	return false
}

// classify decides whether f's parameters all fit the generic path, or says why not.
func classify(f *fn, types map[string]string) ([]genArg, string) {
	var args []genArg
	for _, p := range splitParams(f.params) {
		bt := baseType(p.ctype)
		class := types[bt]
		np := pointers(p.ctype)
		switch {
		case np == 0 && bt == "CUdevice":
			args = append(args, genArg{p, argDevice, "i32"})
		case np == 0 && handleKinds[bt] != "":
			args = append(args, genArg{p, handleKinds[bt], "handle"})
		case np == 0 && bt == "CUdeviceptr":
			return nil, fmt.Sprintf("parameter %s is a device address (needs the session's allocation checks)", p.name)
		case np == 0 && scalar(class):
			args = append(args, genArg{p, argValue, class})
		case np == 1 && !strings.Contains(p.ctype, "const") && scalar(class) && bt != "CUdevice" && bt != "CUdeviceptr" && bt != "char":
			args = append(args, genArg{p, argOut, class})
		case np == 0:
			return nil, fmt.Sprintf("parameter %s is a %s (%s)", p.name, bt, orUnknown(class))
		default:
			return nil, fmt.Sprintf("parameter %s is a pointer to %s (%s)", p.name, bt, orUnknown(class))
		}
	}
	return args, ""
}

func orUnknown(c string) string {
	if c == "" || c == "unknown" {
		return "type not in the header"
	}
	return c
}

// annotations: what a header cannot say. One line per name: "refuse <name> <reason...>" (never
// remoted generically, with the reason the coverage report gives), "async <name>" (sent without
// waiting for the reply; only for calls without outputs), "via <runtime name> <driver name>" (a
// runtime function that is the driver function, same parameters in the same order), "hand <name>
// <reason...>" (returns something other than an error code, a struct or a string: a generated stub,
// which returns an int, would be wrong, so generation fails until it is hand-written).
type annotations struct {
	refuse map[string]string
	hand   map[string]string
	async  map[string]bool
	via    map[string]string // runtime name -> the driver function it is (runtime.ann)
}

func readAnnotations(path string) (*annotations, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	a := &annotations{refuse: map[string]string{}, hand: map[string]string{}, async: map[string]bool{}, via: map[string]string{}}
	for i, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "refuse":
			a.refuse[f[1]] = strings.Join(f[2:], " ")
		case len(f) >= 3 && f[0] == "hand":
			a.hand[f[1]] = strings.Join(f[2:], " ")
		case len(f) == 2 && f[0] == "async":
			a.async[f[1]] = true
		case len(f) == 3 && f[0] == "via":
			a.via[f[1]] = f[2]
		default:
			return nil, fmt.Errorf("%s: line %d: want \"refuse <name> <reason>\", \"hand <name> <reason>\", \"async <name>\" or \"via <runtime name> <driver name>\": %q", path, i+1, l)
		}
	}
	return a, nil
}

var handRe = regexp.MustCompile(`(?s)(?:EXPORT[^;{()]*?\b(\w+)\s*\(|ALIAS\(\s*(\w+)\s*,)`)

// handWritten scans the hand-written C files of dir (every *.c but *_gen.c) for the names they
// export, mapping each to its file.
func handWritten(dirs ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.c"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_gen.c") || strings.HasSuffix(f, "_test.c") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			for _, m := range handRe.FindAllStringSubmatch(string(src), -1) {
				name := m[1] + m[2]
				out[name] = filepath.Base(f)
			}
		}
	}
	return out, nil
}

// decide gives each exported name its verdict.
func decide(exports []string, d *desc, ann *annotations, hand map[string]string, generic bool) []verdict {
	byName := map[string]*fn{}
	for i := range d.fns {
		byName[d.fns[i].name] = &d.fns[i]
	}
	var out []verdict
	for _, name := range exports {
		v := verdict{name: name, fn: byName[name]}
		if file, ok := hand[name]; ok {
			v.hand, v.reason = true, "hand-written ("+file+")"
		}
		switch {
		case ann.refuse[name] != "":
			if !v.hand {
				v.reason = ann.refuse[name]
			}
		case v.fn == nil:
			if !v.hand {
				v.reason = "not declared in the public header (an internal or removed entry point)"
			}
		case !generic:
			if !v.hand {
				v.reason = "not yet remoted (the runtime's generic path is not generated)"
			}
		default:
			args, why := classify(v.fn, d.types)
			if why == "" {
				v.remote, v.generic = true, args
				v.async = ann.async[name] && !hasOut(args)
			} else if !v.hand {
				v.reason = "needs hand-written remoting: " + why
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// needHand fails when a name annotated "hand" (its return type is not an error code) has no
// hand-written definition: the generated stub would return an int where the caller reads a struct
// or a pointer.
func needHand(vs []verdict, ann *annotations, what string) error {
	var missing []string
	for _, v := range vs {
		if why := ann.hand[v.name]; why != "" && !v.hand {
			missing = append(missing, v.name+" ("+why+")")
		}
	}
	for name := range ann.hand {
		if !slices.ContainsFunc(vs, func(v verdict) bool { return v.name == name }) {
			missing = append(missing, name+" (annotated hand but not exported)")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("%s: must be hand-written, no stub can stand for them: %s", what, strings.Join(missing, "; "))
	}
	return nil
}

func hasOut(args []genArg) bool {
	for _, a := range args {
		if a.kind == argOut {
			return true
		}
	}
	return false
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// The wire ids of the generated driver API: the envelope messages (wire spec, ApiCall 1000 and
// ApiCallReply 1001) and, inside ApiCall, each function's own id from driverFirstFn to driverLastFn.
const (
	driverFirstFn = 1002
	driverLastFn  = 2999
)

// fn is one prototype of a description.
type fn struct {
	id     int // the function's wire id (0: none)
	name   string
	ret    string
	params string // the C parameter list, normalized to one line
}

// desc is one library's description: its functions, versioned aliases and the classes of the types
// its prototypes use (see classifyTypes).
type desc struct {
	fns     []fn
	aliases [][2]string // plain name, versioned name
	types   map[string]string
	// structs are the layouts of the structs a prototype takes by value (NPP's NppiSize,
	// NppStreamContext ...), so generated C can pass them as NVIDIA's ABI does without NVIDIA's
	// header; host names, per function, the pointer parameters NVIDIA's documentation of it says
	// are host memory (NPP's, where a pointer is otherwise a device address).
	structs map[string][]field
	host    map[string][]string
}

// field is one member of a struct a prototype takes by value: its class (i32, f32, ptr, or
// another recorded struct's name), name and array length (0: not an array).
type field struct {
	class, name string
	count       int
}

func (d *desc) format(from string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Extracted from NVIDIA's %s by `go run ./gpuserverd/apigen extract -headers DIR`; do not edit.\n", from)
	b.WriteString("# fn <wire id> <name> <return> (<parameters>) | alias <plain> <versioned> | type <class> <name>\n")
	for _, f := range d.fns {
		fmt.Fprintf(&b, "fn %d %s %s (%s)\n", f.id, f.name, f.ret, f.params)
	}
	for _, a := range d.aliases {
		fmt.Fprintf(&b, "alias %s %s\n", a[0], a[1])
	}
	names := make([]string, 0, len(d.types))
	for t := range d.types {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		fmt.Fprintf(&b, "type %s %s\n", d.types[t], t)
	}
	names = names[:0]
	for s := range d.structs {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		fmt.Fprintf(&b, "struct %s", s)
		for _, f := range d.structs[s] {
			fmt.Fprintf(&b, " %s:%s", f.class, f.name)
			if f.count > 0 {
				fmt.Fprintf(&b, ":%d", f.count)
			}
		}
		b.WriteString("\n")
	}
	for _, f := range d.fns {
		if h := d.host[f.name]; len(h) > 0 {
			fmt.Fprintf(&b, "host %s %s\n", f.name, strings.Join(h, " "))
		}
	}
	return b.Bytes()
}

func readDesc(path string) (*desc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseDesc(data)
}

// parseDesc reads a description; a malformed line is an error naming its number.
func parseDesc(data []byte) (*desc, error) {
	d := &desc{types: map[string]string{}, structs: map[string][]field{}, host: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			continue // blank but for spaces
		}
		bad := func(why string) error { return fmt.Errorf("description line %d: %s: %q", n, why, l) }
		switch f[0] {
		case "fn":
			open, close := strings.IndexByte(l, '('), strings.LastIndexByte(l, ')')
			if len(f) < 5 || open < 0 || close < open {
				return nil, bad("want fn <id> <name> <return> (<params>)")
			}
			id, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				return nil, bad("id is not a u32")
			}
			d.fns = append(d.fns, fn{id: int(id), name: f[2], ret: f[3], params: l[open+1 : close]})
		case "alias":
			if len(f) != 3 {
				return nil, bad("want alias <plain> <versioned>")
			}
			d.aliases = append(d.aliases, [2]string{f[1], f[2]})
		case "type":
			if len(f) < 3 {
				return nil, bad("want type <class> <name>")
			}
			d.types[strings.Join(f[2:], " ")] = f[1]
		case "struct":
			if len(f) < 3 {
				return nil, bad("want struct <name> <class>:<field>[:<count>] ...")
			}
			for _, m := range f[2:] {
				p := strings.Split(m, ":")
				n := 0
				if len(p) == 3 {
					var err error
					if n, err = strconv.Atoi(p[2]); err != nil || n < 1 {
						return nil, bad("array length of " + m)
					}
				}
				if len(p) < 2 || len(p) > 3 || p[0] == "" || p[1] == "" {
					return nil, bad("want <class>:<field>[:<count>], got " + m)
				}
				d.structs[f[1]] = append(d.structs[f[1]], field{class: p[0], name: p[1], count: n})
			}
		case "host":
			if len(f) < 3 {
				return nil, bad("want host <function> <parameter> ...")
			}
			d.host[f[1]] = f[2:]
		default:
			return nil, bad("unknown kind " + f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return d, checkStructs(d.structs)
}

// checkStructs refuses a struct member whose class is neither a scalar's, ptr, nor another
// recorded struct, and structs that contain themselves.
func checkStructs(structs map[string][]field) error {
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("description: struct %s contains itself", name)
		case 2:
			return nil
		}
		state[name] = 1
		for _, f := range structs[name] {
			switch {
			case f.class == "ptr" || scalar(f.class):
			case structs[f.class] != nil:
				if err := visit(f.class); err != nil {
					return err
				}
			default:
				return fmt.Errorf("description: struct %s: member %s of unknown class %s", name, f.name, f.class)
			}
		}
		state[name] = 2
		return nil
	}
	for name := range structs {
		if err := visit(name); err != nil {
			return err
		}
	}
	return nil
}

// param is one C parameter: its type as written and its name.
type param struct {
	ctype, name string
	array       int // an array parameter's element count, its dimensions multiplied (T a[2][3]: 6; -1 for T a[]): ctype is then a pointer
}

// splitParams splits a parameter list at its top-level commas (a function-pointer parameter has
// commas of its own) and each parameter into type and name.
func splitParams(list string) []param {
	var out []param
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '(':
				depth++
			case ')':
				depth--
			}
			if list[i] != ',' || depth != 0 {
				continue
			}
		}
		p := strings.TrimSpace(list[start:i])
		start = i + 1
		if p == "" {
			continue
		}
		out = append(out, splitParam(p))
	}
	return out
}

func splitParam(p string) param {
	if strings.Contains(p, "(") { // a function pointer: (*name)(...)
		open := strings.Index(p, "(*")
		if open >= 0 {
			if end := strings.IndexByte(p[open:], ')'); end >= 2 {
				return param{ctype: p, name: strings.TrimSpace(p[open+2 : open+end])}
			}
		}
		return param{ctype: p}
	}
	if open := strings.IndexByte(p, '['); open >= 0 && strings.HasSuffix(p, "]") { // T a[], T a[3], T a[2][3]
		n := 1
		for _, dim := range strings.Split(strings.Trim(p[open:], "[]"), "][") {
			k, err := strconv.Atoi(strings.TrimSpace(dim))
			if err != nil || k < 1 {
				n = -1
				break
			}
			n *= k
		}
		pp := splitParam(strings.TrimSpace(p[:open]))
		pp.ctype = strings.TrimSpace(pp.ctype + " *")
		pp.array = n
		return pp
	}
	i := len(p)
	for i > 0 && (isIdent(p[i-1])) {
		i--
	}
	name, t := p[i:], strings.TrimSpace(p[:i])
	if t == "" || strings.HasSuffix(t, "struct") || strings.HasSuffix(t, "enum") { // unnamed parameter
		return param{ctype: p}
	}
	return param{ctype: strings.Join(strings.Fields(strings.ReplaceAll(t, "*", " * ")), " "), name: name}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// baseType strips qualifiers and pointers: "const CUDA_MEMCPY2D *" is CUDA_MEMCPY2D.
func baseType(ctype string) string {
	if strings.Contains(ctype, "(") {
		return "fnptr"
	}
	var keep []string
	for _, w := range strings.Fields(strings.ReplaceAll(ctype, "*", " ")) {
		switch w {
		case "const", "volatile", "struct", "enum", "union", "__restrict__", "restrict":
			continue
		}
		keep = append(keep, w)
	}
	return strings.Join(keep, " ")
}

// pointers is how many levels of pointer ctype has.
func pointers(ctype string) int { return strings.Count(ctype, "*") }

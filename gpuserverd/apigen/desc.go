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
	d := &desc{types: map[string]string{}}
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
			id, err := strconv.Atoi(f[1])
			if err != nil || id < 0 || id > 65535 {
				return nil, bad("id is not a u16")
			}
			d.fns = append(d.fns, fn{id: id, name: f[2], ret: f[3], params: l[open+1 : close]})
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
		default:
			return nil, bad("unknown kind " + f[0])
		}
	}
	return d, sc.Err()
}

// param is one C parameter: its type as written and its name.
type param struct {
	ctype, name string
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
	if strings.HasSuffix(p, "[]") {
		p = strings.TrimSuffix(p, "[]") + ""
		pp := splitParam(p)
		pp.ctype += "*"
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

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A header to extract: the file, the return type its functions share and the prefix of their names.
type header struct {
	file, ret, prefix, desc string
	firstID                 int      // wire ids of a new function start here (0: not remoted on the wire)
	more                    []string // further headers of the same library, read with file
	// others: also record the library's functions that return something else than ret (id 0:
	// hand-written), and what NVIDIA's documentation says of each pointer parameter (NPP).
	others bool
}

var headers = []header{
	{file: "cuda.h", ret: "CUresult", prefix: "cu", desc: "driver.txt", firstID: driverFirstFn},
	{file: "cuda_runtime_api.h", ret: "cudaError_t", prefix: "cuda", desc: "runtime.txt"},
}

// extract preprocesses each header with the C compiler (so every conditional and macro resolves as
// it does for a program, and __CUDA_API_VERSION_INTERNAL keeps the legacy forms), then records each
// prototype, the versioned aliases (#define cuFoo cuFoo_v2) and the class of each type they use.
// Ids already in the description are kept, so the wire stays stable across toolkit versions.
func extract(headersDir, descDir string) error { return extractAll(headersDir, descDir, headers) }

// extractAll writes each header's description (desc/<h.desc>), keeping the ids it already has.
func extractAll(headersDir, descDir string, hs []header) error {
	for _, h := range hs {
		old, _ := readDesc(filepath.Join(descDir, h.desc))
		d, err := extractOne(headersDir, h, old)
		if err != nil {
			return fmt.Errorf("extract %s: %w", h.file, err)
		}
		if err := os.WriteFile(filepath.Join(descDir, h.desc), d.format(h.file), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var (
	otherRe     = regexp.MustCompile(`(?:const\s+)?(\w+)\s*(\*?)\s*\b(\w+)\s*\(([^;{()]*?)\)\s*;`)
	docRe       = regexp.MustCompile(`(?s)/\*\*(.*?)\*/\s*([^;/{}]*?)\b(\w+)\s*\(`)
	paramDocRe  = regexp.MustCompile(`(?s)\\param\s+(\w+)(.*?)(?:\\param|\\return|\\section|$)`)
	sectionRe   = regexp.MustCompile(`(?s)\\section\s+(\w+)(.*?)(?:\\section|\*/)`)
	sectionRef  = regexp.MustCompile(`\\ref\s+(\w+)`)
	hostWordRe  = regexp.MustCompile(`(?i)\bhost\b`)
	protoRe     = regexp.MustCompile(`(?s)(?:extern\s+)?(?:__host__\s+)?(?:__device__\s+)?(\w+)\s+(\w+)\s*\(([^;{]*?)\)\s*;`)
	aliasRe     = regexp.MustCompile(`(?m)^\s*#define\s+(\w+)\s+(\w+_v\d+)\s*$`)
	attributeRe = regexp.MustCompile(`__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)`)
	typedefRe   = regexp.MustCompile(`(?s)typedef\s+([^;{}]*?)\s*\b(\w+)\s*;`)
	enumRe      = regexp.MustCompile(`(?s)typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;`)
	structRe    = regexp.MustCompile(`(?s)typedef\s+(?:struct|union)\s+\w*\s*\{`)
	fnptrRe     = regexp.MustCompile(`typedef\s+[^;]*\(\s*\w*\s*\*\s*(\w+)\s*\)\s*\(`)
)

func extractOne(dir string, h header, old *desc) (*desc, error) {
	path := filepath.Join(dir, h.file)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(h.more) > 0 { // one translation unit including them all
		all := "#include \"" + h.file + "\"\n"
		for _, m := range h.more {
			b, err := os.ReadFile(filepath.Join(dir, m))
			if err != nil {
				return nil, err
			}
			raw = append(raw, b...)
			all += "#include \"" + m + "\"\n"
		}
		path = filepath.Join(os.TempDir(), "apigen-"+h.desc+".h")
		if err := os.WriteFile(path, []byte(all), 0o644); err != nil {
			return nil, err
		}
		defer os.Remove(path)
	}
	cmd := exec.Command("cc", "-E", "-P", "-x", "c", "-D__CUDA_API_VERSION_INTERNAL", "-DCUFFTAPI=", "-DCUSOLVER_DEPRECATED(x)=", "-I", dir, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pp, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("preprocess: %w: %s", err, stderr.String())
	}
	src := string(pp)
	d := &desc{types: map[string]string{}, structs: map[string][]field{}, host: map[string][]string{}}
	seen := map[string]bool{}
	for _, m := range protoRe.FindAllStringSubmatch(src, -1) {
		if m[1] != h.ret || !strings.HasPrefix(m[2], h.prefix) || seen[m[2]] {
			continue
		}
		seen[m[2]] = true
		d.fns = append(d.fns, fn{name: m[2], ret: m[1], params: normalize(m[3])})
	}
	if h.others {
		for _, m := range otherRe.FindAllStringSubmatch(src, -1) {
			if !strings.HasPrefix(m[3], h.prefix) || seen[m[3]] || m[1] == h.ret {
				continue
			}
			seen[m[3]] = true
			d.fns = append(d.fns, fn{name: m[3], ret: m[1] + m[2], params: normalize(m[4])})
		}
		hostParams(string(raw), d)
	}
	for _, m := range aliasRe.FindAllStringSubmatch(string(raw), -1) {
		if strings.HasPrefix(m[1], h.prefix) && seen[m[2]] {
			d.aliases = append(d.aliases, [2]string{m[1], m[2]})
		}
	}
	sort.Slice(d.fns, func(i, j int) bool { return d.fns[i].name < d.fns[j].name })
	sort.Slice(d.aliases, func(i, j int) bool { return d.aliases[i][0] < d.aliases[j][0] })
	class := classifyTypes(src, d)
	if h.others {
		structLayouts(src, d, class)
	}
	assignIDs(d, old, h.firstID, h.ret)
	return d, nil
}

// hostParams records, for each function of d with pointer or array parameters, those that NVIDIA's
// documentation block before its prototype says are host memory ("?" for a function without one):
// NPP's pointers are device addresses but for these.
func hostParams(raw string, d *desc) {
	docs := map[string]string{}
	for _, m := range docRe.FindAllStringSubmatch(raw, -1) {
		docs[m[3]] = m[1]
	}
	// A group's common parameters (\section CommonSumParameters) apply where a function's block
	// refers to them.
	sections := map[string]string{}
	for _, m := range sectionRe.FindAllStringSubmatch(raw, -1) {
		sections[m[1]] += m[2]
	}
	for name, doc := range docs {
		for _, r := range sectionRef.FindAllStringSubmatch(doc, -1) {
			docs[name] += "\n" + sections[r[1]]
		}
	}
	for _, f := range d.fns {
		var ptrs []string
		for _, p := range splitParams(f.params) {
			if pointers(p.ctype) > 0 {
				ptrs = append(ptrs, p.name)
			}
		}
		if len(ptrs) == 0 {
			continue
		}
		doc, ok := docs[f.name]
		if !ok {
			d.host[f.name] = []string{"?"}
			continue
		}
		said := map[string]string{}
		for i := 0; i < len(doc); {
			m := paramDocRe.FindStringSubmatchIndex(doc[i:])
			if m == nil {
				break
			}
			said[doc[i+m[2]:i+m[3]]] += doc[i+m[4] : i+m[5]]
			i += m[5] // the next \param starts where this one's text ends
		}
		var host []string
		for _, p := range ptrs {
			if hostWordRe.MatchString(said[p]) || strings.HasPrefix(p, "hp") {
				host = append(host, p)
			}
		}
		if len(host) > 0 {
			d.host[f.name] = host
		}
	}
}

// normalize puts a parameter list on one line with single spaces.
func normalize(p string) string {
	p = strings.Join(strings.Fields(p), " ")
	p = strings.ReplaceAll(p, " ,", ",")
	p = strings.ReplaceAll(p, "( ", "(")
	p = strings.ReplaceAll(p, " )", ")")
	if p == "void" {
		return ""
	}
	return p
}

// classifyTypes records, for each type name the prototypes use, what it is: a scalar of a size, an
// enum, an opaque handle (a pointer to an incomplete struct), a struct, or a function pointer.
func classifyTypes(src string, d *desc) map[string]string {
	// An attribute after a typedef's name (cuSPARSE's "typedef struct csrilu02Info* csrilu02Info_t
	// CUSPARSE_DEPRECATED_TYPE;", preprocessed to __attribute__((deprecated(...)))) hides the name.
	src = attributeRe.ReplaceAllString(src, "")
	class := map[string]string{
		"int": "i32", "signed": "i32", "unsigned int": "u32", "unsigned": "u32", "short": "i16",
		"unsigned short": "u16", "char": "i8", "signed char": "i8", "unsigned char": "u8", "long": "i64", "long int": "i64",
		"unsigned long": "u64", "long unsigned int": "u64", "unsigned long int": "u64",
		"long long": "i64", "unsigned long long": "u64", "float": "f32", "double": "f64",
		"size_t": "u64", "void": "void", "long long int": "i64", "int64_t": "i64", "uint64_t": "u64",
		"int32_t": "i32", "uint32_t": "u32",
	}
	for _, m := range enumRe.FindAllStringSubmatch(src, -1) {
		class[m[1]] = "enum"
	}
	for _, m := range fnptrRe.FindAllStringSubmatch(src, -1) {
		class[m[1]] = "fnptr"
	}
	// Structs: the name after the closing brace of a typedef struct { ... } Name;
	for _, loc := range structRe.FindAllStringIndex(src, -1) {
		depth, i := 0, loc[1]-1
		for ; i < len(src); i++ {
			if src[i] == '{' {
				depth++
			} else if src[i] == '}' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		rest := src[i+1:]
		if end := strings.IndexByte(rest, ';'); end >= 0 {
			if f := strings.Fields(strings.Trim(rest[:end], " *")); len(f) > 0 {
				class[strings.Trim(f[0], "*,")] = "struct"
			}
		}
	}
	// Plain typedefs resolve through earlier ones; several passes settle chains.
	defs := typedefRe.FindAllStringSubmatch(src, -1)
	for pass := 0; pass < 4; pass++ {
		for _, m := range defs {
			base, name := strings.TrimSpace(m[1]), m[2]
			if strings.Contains(base, "(") {
				continue
			}
			switch {
			case strings.HasPrefix(base, "struct ") && strings.HasSuffix(base, "*"):
				class[name] = "handle"
			case strings.HasPrefix(base, "struct ") || strings.HasPrefix(base, "union "):
				if _, ok := class[name]; !ok {
					class[name] = "struct"
				}
			case strings.HasPrefix(base, "enum "):
				class[name] = "enum"
			default:
				if c, ok := class[base]; ok {
					class[name] = c
				}
			}
		}
	}
	for _, f := range d.fns {
		for _, p := range splitParams(f.params) {
			t := baseType(p.ctype)
			if c, ok := class[t]; ok {
				d.types[t] = c
			} else {
				d.types[t] = "unknown"
			}
		}
	}
	return class
}

// structLayouts records the members of each struct a prototype of d takes by value (and of the
// structs inside those), each as a class: a scalar's, an enum as i32, any pointer as ptr.
func structLayouts(src string, d *desc, class map[string]string) {
	var add func(name string) bool
	add = func(name string) bool {
		if _, ok := d.structs[name]; ok {
			return true
		}
		m := regexp.MustCompile(`typedef\s+struct\s*\w*\s*\{([^{}]*)\}\s*` + regexp.QuoteMeta(name) + `\s*;`).FindStringSubmatch(src)
		if m == nil {
			return false
		}
		var fields []field
		for _, decl := range strings.Split(m[1], ";") {
			if strings.TrimSpace(decl) == "" {
				continue
			}
			p := splitParam(strings.TrimSpace(decl))
			f := field{name: p.name, count: max(p.array, 0)}
			base := baseType(p.ctype)
			if p.array != 0 { // a member array: splitParam made it a pointer
				base = baseType(strings.TrimSuffix(p.ctype, " *"))
			}
			switch c := class[base]; {
			case pointers(p.ctype) > 0 && p.array == 0 || pointers(p.ctype) > 1 || c == "handle":
				f.class = "ptr"
			case c == "enum":
				f.class = "i32"
			case c == "struct":
				if !add(base) {
					return false
				}
				f.class = base
			case scalar(c):
				f.class = c
			default:
				return false
			}
			if p.array < 0 || p.name == "" {
				return false
			}
			fields = append(fields, f)
		}
		d.structs[name] = fields
		return true
	}
	for _, f := range d.fns {
		for _, p := range splitParams(f.params) {
			if t := baseType(p.ctype); pointers(p.ctype) == 0 && class[t] == "struct" {
				add(t)
			}
		}
	}
}

// assignIDs keeps each function's id from the previous description and numbers new ones after the
// highest, so an id never changes meaning.
func assignIDs(d *desc, old *desc, first int, ret string) {
	if first == 0 {
		return
	}
	next := first
	prev := map[string]int{}
	if old != nil {
		for _, f := range old.fns {
			prev[f.name] = f.id
			if f.id >= next {
				next = f.id + 1
			}
		}
	}
	for i := range d.fns {
		if d.fns[i].ret != ret {
			continue // hand-written: no wire id
		}
		if id, ok := prev[d.fns[i].name]; ok && id != 0 {
			d.fns[i].id = id
			continue
		}
		d.fns[i].id = next
		next++
	}
}

// readLines reads a file of one name per line, skipping blanks and # comments.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

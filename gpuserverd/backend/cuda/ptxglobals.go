package cuda

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A PTX module's .global variables can be placed by gpuserverd instead of the driver (pinned.go):
// each definition at module scope is made an .extern declaration, and the driver's JIT linker
// resolves it to an address in the session's reserved range. These are the text operations: find
// the definitions, and rewrite them. Anything it does not understand leaves the module to the
// driver (why says what), never a guess.

// ptxGlobal is one .global definition found at module scope.
type ptxGlobal struct {
	name       string
	start, end int    // the statement's bytes, end just past its ';'
	decl       string // the statement as an .extern declaration
}

var (
	ptxIdent   = regexp.MustCompile(`^[A-Za-z_$%][A-Za-z0-9_$]*`)
	ptxNoPin   = []string{".texref", ".samplerref", ".surfref", ".attribute"}
	ptxLinkage = map[string]bool{".visible": true, ".weak": true, ".common": true}
)

// maxPinAlign is the largest .align a pinned global may ask for: the session's small allocations
// are aligned to smallAlign, larger ones to the mapping granularity.
const maxPinAlign = smallAlign

// ptxText is a PTX image without the NUL a C string ends with.
func ptxText(image []byte) []byte { return bytes.TrimRight(image, "\x00") }

// isPTX says whether a module image is PTX text (not a cubin or fat binary).
func isPTX(image []byte) bool {
	image = bytes.TrimLeft(image, " \t\r\n")
	return bytes.HasPrefix(image, []byte("//")) || bytes.HasPrefix(image, []byte(".version")) ||
		bytes.HasPrefix(image, []byte("/*"))
}

// ptxStatements calls each with every module-scope statement of ptx ([start, end), end just past
// its ';') and body (if not nil) with every block at module scope (a function's body: the
// offsets of its '{' and '}'). It fails on text it cannot follow (unbalanced braces, an
// unterminated comment or string).
func ptxStatements(ptx []byte, each func(start, end int) error, body func(open, close int)) error {
	start, depth, init, open := -1, 0, false, 0
	for i := 0; i < len(ptx); i++ {
		ch := ptx[i]
		switch {
		case ch == '/' && i+1 < len(ptx) && ptx[i+1] == '/':
			j := bytes.IndexByte(ptx[i:], '\n')
			if j < 0 {
				return nil // a comment to the end
			}
			i += j
			continue
		case ch == '/' && i+1 < len(ptx) && ptx[i+1] == '*':
			j := bytes.Index(ptx[i+2:], []byte("*/"))
			if j < 0 {
				return fmt.Errorf("PTX: unterminated comment at byte %d", i)
			}
			if depth == 0 && start >= 0 && !init {
				return fmt.Errorf("PTX: a comment inside the statement at byte %d", start)
			}
			i += j + 3
			continue
		case ch == '"':
			j := bytes.IndexByte(ptx[i+1:], '"')
			if j < 0 {
				return fmt.Errorf("PTX: unterminated string at byte %d", i)
			}
			i += j + 1
			continue
		}
		if depth > 0 && !init {
			// Inside a function body.
			switch ch {
			case '{':
				depth++
			case '}':
				depth--
				if depth == 0 {
					start = -1
					if body != nil {
						body(open, i)
					}
				}
			}
			continue
		}
		switch {
		case ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n':
		case start < 0 && lineDirective(ptx[i:]):
			// .version, .target, .address_size and .file end with their line, not a ';'.
			j := bytes.IndexByte(ptx[i:], '\n')
			if j < 0 {
				return nil
			}
			i += j
		case start < 0:
			start = i
			if ch == '{' { // a bare block at module scope
				depth, open = 1, i
			}
			if ch == ';' {
				start = -1
			}
		case ch == '=' && depth == 0:
			init = true
		case ch == '{' && init:
			depth++
		case ch == '}' && init:
			if depth == 0 {
				return fmt.Errorf("PTX: unbalanced '}' at byte %d", i)
			}
			depth--
		case ch == '{':
			depth, open = 1, i // a function's body
		case ch == ';' && depth == 0:
			if err := each(start, i+1); err != nil {
				return err
			}
			start, init = -1, false
		}
	}
	if depth != 0 || start >= 0 && strings.TrimSpace(string(ptx[start:])) != "" {
		return fmt.Errorf("PTX: text ends inside a statement or a block")
	}
	return nil
}

// lineDirective says whether b starts with a directive that ends with its line.
func lineDirective(b []byte) bool {
	for _, d := range []string{".version", ".target", ".address_size", ".file"} {
		if bytes.HasPrefix(b, []byte(d)) && len(b) > len(d) && (b[len(d)] == ' ' || b[len(d)] == '\t') {
			return true
		}
	}
	return false
}

// ptxGlobalDefs finds the module-scope .global definitions of ptx. why is set, and nothing is
// returned, when one of them cannot be rewritten.
func ptxGlobalDefs(ptx []byte) (defs []ptxGlobal, why string) {
	err := ptxStatements(ptx, func(start, end int) error {
		stmt := string(ptx[start : end-1])
		decl, _, _ := strings.Cut(stmt, "=")
		toks := strings.Fields(decl)
		if !hasToken(toks, ".global") || hasToken(toks, ".extern") {
			return nil
		}
		for _, bad := range ptxNoPin {
			if strings.Contains(decl, bad) {
				return fmt.Errorf("a .global %s variable", strings.TrimPrefix(bad, "."))
			}
		}
		if strings.Contains(decl, ",") {
			return fmt.Errorf("a .global statement declaring several variables")
		}
		var name string
		var kept []string
		for i, t := range toks {
			switch {
			case ptxLinkage[t]:
				continue
			case t == ".align" && i+1 < len(toks):
				a, err := strconv.Atoi(toks[i+1])
				if err != nil || a <= 0 || a > maxPinAlign {
					return fmt.Errorf("a .global variable aligned to %q bytes (at most %d)", toks[i+1], maxPinAlign)
				}
			case name == "" && !strings.HasPrefix(t, ".") && (i == 0 || toks[i-1] != ".align"):
				name = ptxIdent.FindString(t)
			}
			kept = append(kept, t)
		}
		if name == "" {
			return fmt.Errorf("a .global statement without a name at byte %d", start)
		}
		defs = append(defs, ptxGlobal{name: name, start: start, end: end, decl: ".extern " + strings.Join(kept, " ") + ";"})
		return nil
	}, nil)
	if err != nil {
		return nil, err.Error()
	}
	return defs, ""
}

func hasToken(toks []string, t string) bool {
	for _, x := range toks {
		if x == t {
			return true
		}
	}
	return false
}

// externPTX is ptx with every definition in defs made its .extern declaration.
func externPTX(ptx []byte, defs []ptxGlobal) []byte {
	var out bytes.Buffer
	out.Grow(len(ptx))
	at := 0
	for _, d := range defs {
		out.Write(ptx[at:d.start])
		out.WriteString(d.decl)
		at = d.end
	}
	out.Write(ptx[at:])
	return out.Bytes()
}

// pinReg is the register prefix pinnedPTX declares in each function that uses a pinned global.
const pinReg = "%gcpin"

// pinnedPTX is ptx with the globals in defs placed at their pins: each definition removed, and
// each use in a function body read from a register loaded with the pinned address just before
// the instruction ("ld.global.u32 %r1, [counter+4];" becomes "mov.u64 %gcpin0, 0x...;
// ld.global.u32 %r1, [%gcpin0+4];"), the register declared at the body's start. Kernels then
// reach the global at the pin, the only place it exists; the driver places nothing. A use it
// cannot rewrite (at module scope, in an initializer; a symbol-plus-offset outside an address)
// is refused, naming it.
func pinnedPTX(ptx []byte, defs []ptxGlobal, pins map[string]pin) ([]byte, error) {
	names := map[string]bool{}
	for _, d := range defs {
		if _, ok := pins[d.name]; !ok {
			return nil, fmt.Errorf("global %q has no pin", d.name)
		}
		names[d.name] = true
	}
	var bodies [][2]int
	var stmts [][2]int
	err := ptxStatements(ptx, func(start, end int) error {
		stmts = append(stmts, [2]int{start, end})
		return nil
	}, func(open, close int) { bodies = append(bodies, [2]int{open, close}) })
	if err != nil {
		return nil, err
	}
	isDef := map[int]bool{}
	for _, d := range defs {
		isDef[d.start] = true
	}
	for _, st := range stmts {
		text := ptx[st[0]:st[1]]
		if isDef[st[0]] {
			// Its own name is declared here; an initializer holding an address is not copied right.
			_, init, _ := bytes.Cut(text, []byte("="))
			text = init
		}
		if uses := ptxUses(text, names); len(uses) > 0 {
			return nil, fmt.Errorf("global %q is used at module scope (an initializer's address?)", uses[0].name)
		}
	}
	var out bytes.Buffer
	out.Grow(len(ptx) + len(ptx)/8)
	at, di, bi := 0, 0, 0
	for at < len(ptx) {
		next := len(ptx)
		if di < len(defs) {
			next = min(next, defs[di].start)
		}
		if bi < len(bodies) {
			next = min(next, bodies[bi][0])
		}
		out.Write(ptx[at:next])
		at = next
		switch {
		case at == len(ptx):
		case di < len(defs) && at == defs[di].start:
			fmt.Fprintf(&out, "// %s: placed by gpucloud at %#x", defs[di].name, pins[defs[di].name][0])
			at = defs[di].end
			di++
		default:
			b, err := pinnedBody(ptx[bodies[bi][0]:bodies[bi][1]+1], names, pins)
			if err != nil {
				return nil, err
			}
			out.Write(b)
			at = bodies[bi][1] + 1
			bi++
		}
	}
	return out.Bytes(), nil
}

// ptxUse is a pinned global's name found at [at, at+len(name)) of a line.
type ptxUse struct {
	name string
	at   int
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ptxUses finds the whole-word uses of names in text, comments left out.
func ptxUses(text []byte, names map[string]bool) []ptxUse {
	var uses []ptxUse
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '/' && i+1 < len(text) && text[i+1] == '/':
			j := bytes.IndexByte(text[i:], '\n')
			if j < 0 {
				return uses
			}
			i += j
		case isIdentByte(c) || c == '%':
			j := i + 1
			for j < len(text) && isIdentByte(text[j]) {
				j++
			}
			// A register (%...) or a directive or member (.x) is not a global's name.
			if w := string(text[i:j]); c != '%' && (i == 0 || text[i-1] != '.') && names[w] {
				uses = append(uses, ptxUse{w, i})
			}
			i = j
		default:
			i++
		}
	}
	return uses
}

// pinnedBody rewrites one function body ('{' to '}') for pinnedPTX.
func pinnedBody(body []byte, names map[string]bool, pins map[string]pin) ([]byte, error) {
	lines := bytes.SplitAfter(body[1:], []byte("\n"))
	var out bytes.Buffer
	regs := 0
	for _, line := range lines {
		uses := ptxUses(line, names)
		if len(uses) == 0 {
			out.Write(line)
			continue
		}
		regs = max(regs, len(uses))
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		out.Write(indent)
		at := 0
		var rest bytes.Buffer
		for i, u := range uses {
			fmt.Fprintf(&out, "mov.u64 %s%d, %#x; ", pinReg, i, pins[u.name][0])
			end := u.at + len(u.name)
			inAddr := bytes.LastIndexByte(line[:u.at], '[') > bytes.LastIndexByte(line[:u.at], ']')
			if after := bytes.TrimLeft(line[end:], " \t"); !inAddr && len(after) > 0 && (after[0] == '+' || after[0] == '-') {
				return nil, fmt.Errorf("global %q is used with an offset outside an address: %s", u.name, bytes.TrimSpace(line))
			}
			rest.Write(line[at:u.at])
			fmt.Fprintf(&rest, "%s%d", pinReg, i)
			at = end
		}
		rest.Write(line[at:])
		out.Write(bytes.TrimLeft(rest.Bytes(), " \t"))
	}
	b := out.Bytes()
	head := []byte("{")
	if regs > 0 {
		head = fmt.Appendf(nil, "{\n\t.reg .b64 %s<%d>;", pinReg, regs)
	}
	return append(head, b...), nil
}

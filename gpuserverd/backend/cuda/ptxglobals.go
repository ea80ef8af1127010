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
			}
			kept = append(kept, t)
		}
		name := declaredName(toks)
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

// declaredName is the variable a PTX declaration's tokens name: the first that is no directive
// (".global", ".u32" ...) nor an alignment's value; "" when there is none.
func declaredName(toks []string) string {
	for i, t := range toks {
		if !strings.HasPrefix(t, ".") && (i == 0 || toks[i-1] != ".align") {
			return ptxIdent.FindString(t)
		}
	}
	return ""
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

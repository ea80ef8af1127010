package cuda

import (
	"bytes"
	"fmt"
)

// The rewrite that loads a PTX module with its globals at pinned addresses (pinned.go): the
// definitions found by ptxGlobalDefs removed, their uses read from a register.

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

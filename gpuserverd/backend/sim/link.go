package sim

import (
	"fmt"
	"sort"
	"strings"

	"gpucloud/gpuserverd/backend"
)

var _ backend.Linker = (*Context)(nil)

// link is a JIT link in progress: the kernels and globals of its inputs so far.
type link struct {
	kernels map[string]bool
	globals map[string]uint64
	inputs  int
}

// maxLinkInputs bounds a link's inputs (each is parsed and kept).
const maxLinkInputs = 1024

func (c *Context) LinkCreate() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fam.links == nil {
		c.fam.links = map[backend.Handle]*link{}
	}
	h := c.handle()
	c.fam.links[h] = &link{kernels: map[string]bool{}, globals: map[string]uint64{}}
	return h, nil
}

func (c *Context) linkOf(h backend.Handle) (*link, error) {
	l, ok := c.fam.links[h]
	if !ok {
		return nil, fmt.Errorf("link %d: %w", h, backend.ErrInvalidHandle)
	}
	return l, nil
}

// LinkAddData takes a simulator image as any of cubin (0), PTX (1), fat binary (2) or object (3);
// a symbol defined twice is refused, as a linker refuses it.
func (c *Context) LinkAddData(h backend.Handle, typ uint32, name string, data []byte) error {
	if typ > 3 {
		return fmt.Errorf("link input %q of type %d (cubin, PTX, fat binary or object): %w", name, typ, backend.ErrInvalidValue)
	}
	kernels, globals, _, err := parseImage(data)
	if err != nil {
		return fmt.Errorf("link input %q: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.linkOf(h)
	if err != nil {
		return err
	}
	if l.inputs >= maxLinkInputs {
		return fmt.Errorf("link %d: more than %d inputs: %w", h, maxLinkInputs, backend.ErrInvalidValue)
	}
	for _, k := range kernels {
		if l.kernels[k] {
			return fmt.Errorf("link input %q: kernel %s defined twice: %w", name, k, backend.ErrInvalidImage)
		}
	}
	for g := range globals {
		if _, ok := l.globals[g]; ok {
			return fmt.Errorf("link input %q: global %s defined twice: %w", name, g, backend.ErrInvalidImage)
		}
	}
	for _, k := range kernels {
		l.kernels[k] = true
	}
	for g, n := range globals {
		l.globals[g] = n
	}
	l.inputs++
	return nil
}

// LinkComplete writes the linked image: one simulator image with every input's symbols.
func (c *Context) LinkComplete(h backend.Handle) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.linkOf(h)
	if err != nil {
		return nil, err
	}
	if l.inputs == 0 {
		return nil, fmt.Errorf("link %d has no inputs: %w", h, backend.ErrInvalidValue)
	}
	var b strings.Builder
	b.WriteString(imageMagic + "\n")
	ks := make([]string, 0, len(l.kernels))
	for k := range l.kernels {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "kernel %s\n", k)
	}
	gs := make([]string, 0, len(l.globals))
	for g := range l.globals {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	for _, g := range gs {
		fmt.Fprintf(&b, "global %s %d\n", g, l.globals[g])
	}
	return append([]byte(b.String()), 0), nil
}

func (c *Context) LinkDestroy(h backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.linkOf(h); err != nil {
		return err
	}
	delete(c.fam.links, h)
	return nil
}

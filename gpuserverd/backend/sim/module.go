package sim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gpucloud/gpuserverd/backend"
)

// A simulated module image is text, one declaration a line:
//
//	GPUSIM-MODULE 1
//	kernel vector_add_f32      a built-in kernel (see kernels.go) this module provides
//	global counter 4           a device global of 4 bytes, zero-initialised
//	driverglobal table 64      the same, standing for one NVIDIA's driver places itself (the cuda
//	                           backend's cubin modules): once the program asks its address, a
//	                           checkpoint of the session is refused, naming it; otherwise a
//	                           restore places it anew, zeroed, as a load of the module does, and
//	                           writes it from the image's contents (checkpoint.go)
//	global xxx 4 managed 10    a managed variable (__managed__) of 4 bytes, its first 8 bytes
//	                           little-endian 10 (the initial value is optional)
//
// A PTX image is accepted too: its ".entry <name>" directives name the kernels, so a test program
// can load the same PTX it would give a real GPU; only built-in names can be launched. Inside a
// fat binary (or any container) the text is found wherever it starts.
const imageMagic = "GPUSIM-MODULE 1"

// MaxGlobal bounds a declared global's size.
const MaxGlobal = 1 << 30

type module struct {
	image   []byte // as the guest sent it, for a checkpoint (checkpoint.go)
	kernels map[string]bool
	globals map[string]uint64 // name -> device address
	sizes   map[string]uint64
	placed  map[string]bool // driverglobal names
	held    map[string]bool // driverglobal names whose address the program asked for
	managed map[uint64]bool // the managed variables' addresses
}

// managedDecl is what a "global ... managed" line adds: the variable is managed, with an initial
// value.
type managedDecl struct{ init uint64 }

var ptxEntry = regexp.MustCompile(`\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)`)

func parseImage(image []byte) (kernels []string, globals map[string]uint64, managed map[string]managedDecl, err error) {
	image = bytes.TrimRight(image, "\x00") // cuModuleLoadData images are often NUL-terminated
	globals, managed = map[string]uint64{}, map[string]managedDecl{}
	// A fat binary or other container may carry the text after its own header.
	at := bytes.Index(image, []byte(imageMagic))
	switch {
	case at >= 0:
		sc := bufio.NewScanner(bytes.NewReader(image[at:]))
		sc.Scan()
		for n := 2; sc.Scan(); n++ {
			w := strings.Fields(sc.Text())
			switch {
			case len(w) == 0 || strings.HasPrefix(w[0], "#"):
			case w[0] == "kernel" && len(w) == 2:
				kernels = append(kernels, w[1])
			case (w[0] == "global" || w[0] == "driverglobal") && len(w) == 3,
				w[0] == "global" && (len(w) == 4 || len(w) == 5) && w[3] == "managed":
				size, err := strconv.ParseUint(w[2], 10, 64)
				if err != nil || size == 0 || size > MaxGlobal {
					return nil, nil, nil, fmt.Errorf("module image line %d: global size %q: %w", n, w[2], backend.ErrInvalidImage)
				}
				globals[w[1]] = size
				if len(w) > 3 {
					var d managedDecl
					if len(w) == 5 {
						if d.init, err = strconv.ParseUint(w[4], 10, 64); err != nil {
							return nil, nil, nil, fmt.Errorf("module image line %d: initial value %q: %w", n, w[4], backend.ErrInvalidImage)
						}
					}
					managed[w[1]] = d
				}
			default:
				return nil, nil, nil, fmt.Errorf("module image line %d: want \"kernel <name>\", \"[driver]global <name> <bytes>\" or \"global <name> <bytes> managed [<init>]\": %w", n, backend.ErrInvalidImage)
			}
		}
	case bytes.Contains(image, []byte(".entry")) && bytes.Contains(image, []byte(".version")):
		for _, m := range ptxEntry.FindAllSubmatch(image, -1) {
			kernels = append(kernels, string(m[1]))
		}
	default:
		return nil, nil, nil, fmt.Errorf("module image is neither %q text nor PTX: %w", imageMagic, backend.ErrInvalidImage)
	}
	return kernels, globals, managed, nil
}

// driverPlaced is the names an image declares with driverglobal.
func driverPlaced(image []byte) map[string]bool {
	placed := map[string]bool{}
	for _, line := range strings.Split(string(image), "\n") {
		if w := strings.Fields(line); len(w) == 3 && w[0] == "driverglobal" {
			placed[w[1]] = true
		}
	}
	return placed
}

func (c *Context) ModuleLoadData(image []byte) (backend.Handle, error) {
	kernels, globals, managed, err := parseImage(image)
	if err != nil {
		return 0, err
	}
	m := &module{image: append([]byte(nil), image...), kernels: map[string]bool{}, globals: map[string]uint64{}, sizes: globals,
		placed: driverPlaced(image), managed: map[uint64]bool{}}
	for _, k := range kernels {
		m.kernels[k] = true
	}
	for name, size := range globals {
		ptr, err := c.MemAlloc(size)
		if err != nil {
			c.freeGlobals(m)
			return 0, fmt.Errorf("module global %s: %w", name, err)
		}
		m.globals[name] = ptr
		if d, ok := managed[name]; ok {
			m.managed[ptr] = true
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], d.init)
			if err := c.MemcpyHtoD(ptr, b[:min(size, 8)], 0, false); err != nil {
				c.freeGlobals(m)
				return 0, fmt.Errorf("module global %s: %w", name, err)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.handle()
	c.modules[h] = m
	return h, nil
}

func (c *Context) freeGlobals(m *module) {
	for _, ptr := range m.globals {
		_ = c.MemFree(ptr)
	}
}

func (c *Context) module(h backend.Handle) (*module, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.modules[h]
	if !ok {
		return nil, fmt.Errorf("module %d: %w", h, backend.ErrInvalidHandle)
	}
	return m, nil
}

func (c *Context) ModuleUnload(h backend.Handle) error {
	m, err := c.module(h)
	if err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.modules, h)
	c.mu.Unlock()
	c.freeGlobals(m)
	return nil
}

func (c *Context) ModuleGetFunction(h backend.Handle, name string) (backend.Handle, error) {
	m, err := c.module(h)
	if err != nil {
		return 0, err
	}
	k, ok := builtins[name]
	if !m.kernels[name] || !ok {
		return 0, fmt.Errorf("function %q in module %d: %w", name, h, backend.ErrNotFound)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.handle()
	c.functions[f] = k
	if c.fnOrigin == nil {
		c.fnOrigin = map[backend.Handle]backend.Handle{}
	}
	c.fnOrigin[f] = h
	return f, nil
}

func (c *Context) ModuleGetGlobal(h backend.Handle, name string) (uint64, uint64, error) {
	m, err := c.module(h)
	if err != nil {
		return 0, 0, err
	}
	ptr, ok := m.globals[name]
	if !ok {
		return 0, 0, fmt.Errorf("global %q in module %d: %w", name, h, backend.ErrNotFound)
	}
	if m.placed[name] {
		c.mu.Lock()
		if m.held == nil {
			m.held = map[string]bool{}
		}
		m.held[name] = true
		c.mu.Unlock()
	}
	return ptr, m.sizes[name], nil
}

func (c *Context) function(h backend.Handle) (*kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.functions[h]
	if !ok {
		return nil, fmt.Errorf("function %d: %w", h, backend.ErrInvalidHandle)
	}
	return k, nil
}

func (c *Context) ParamLayout(h backend.Handle) ([]backend.Param, error) {
	k, err := c.function(h)
	if err != nil {
		return nil, err
	}
	return append([]backend.Param(nil), k.params...), nil
}

func (c *Context) FuncGetAttribute(h backend.Handle, attr int32) (int32, error) {
	if _, err := c.function(h); err != nil {
		return 0, err
	}
	switch attr {
	case 0: // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
		return 1024, nil
	case 4: // CU_FUNC_ATTRIBUTE_NUM_REGS
		return 32, nil
	case 5, 6: // PTX and binary version
		return 90, nil
	}
	if v, ok := c.settable(h, attr); ok {
		return v, nil
	}
	if attr < 0 || attr > 20 {
		return 0, fmt.Errorf("function attribute %d: %w", attr, backend.ErrInvalidValue)
	}
	return 0, nil
}

// IsManaged says whether ptr is a managed variable of one of the context's modules.
func (c *Context) IsManaged(ptr uint64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.modules {
		if m.managed[ptr] {
			return true, nil
		}
	}
	return false, nil
}

package sim

import (
	"fmt"
	"slices"

	"gpucloud/gpuserverd/backend"
)

var _ backend.GraphExtras = (*Context)(nil)

// condHandle is a conditional handle: the value device code sets (the built-in kernels cond_set
// and cond_countdown) and conditional nodes read. Guarded by Context.mu.
type condHandle struct {
	id           uint64
	graph        *graph
	defaultValue uint32
	assign       bool // CU_GRAPH_COND_ASSIGN_DEFAULT: the default is set at each launch
	value        uint32
}

// condNode is a conditional node: its handle and body graphs.
type condNode struct {
	handle *condHandle
	typ    uint32
	bodies []*graph
}

// maxIterations bounds a WHILE node here: a GPU would spin on, the simulator reports a fault.
const maxIterations = 1 << 20

// graphAlloc is an allocation node's memory: its address is fixed when the node is made, the
// memory is there from the node's execution until a free node, cuMemFree or cuMemFreeAsync.
type graphAlloc struct {
	a    *allocation
	size uint64
	live bool
}

// graphMem is the device's graph memory: what live graph allocations use and what the graphs'
// pool keeps reserved from the device (until DeviceGraphMemTrim gives the unused part back).
type graphMem struct {
	used, usedHigh, reserved, reservedHigh uint64
}

// snapshot copies g for an executable graph: later changes to g or its bodies do not reach it.
func snapshot(g *graph) *graph {
	x := &graph{nodes: make([]*graphNode, len(g.nodes)), handles: g.handles}
	for i, n := range g.nodes {
		cp := *n
		if n.cond != nil {
			cn := *n.cond
			cn.bodies = make([]*graph, len(n.cond.bodies))
			for j, b := range n.cond.bodies {
				cn.bodies[j] = snapshot(b)
			}
			cp.cond = &cn
		}
		x.nodes[i] = &cp
	}
	return x
}

// forgetGraph drops the handles of g's conditional bodies, which go with g. c.mu held.
func (c *Context) forgetGraph(g *graph) {
	for _, n := range g.nodes {
		if n.cond == nil {
			continue
		}
		for _, b := range n.cond.bodies {
			c.forgetGraph(b)
			for h, gg := range c.fam.graphs {
				if gg == b {
					delete(c.fam.graphs, h)
				}
			}
		}
	}
}

// walk calls fn for every node of g and of its bodies.
func walk(g *graph, fn func(*graphNode)) {
	for _, n := range g.nodes {
		fn(n)
		if n.cond != nil {
			for _, b := range n.cond.bodies {
				walk(b, fn)
			}
		}
	}
}

// allocsFreed refuses a launch while an allocation of an earlier launch is not yet freed, as the
// driver does (the address is the node's alone).
func (c *Context) allocsFreed(x *graph) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	walk(x, func(n *graphNode) {
		if n.alloc != nil && n.alloc.live && err == nil {
			err = fmt.Errorf("launch: the graph's allocation %#x of its last launch is not freed: %w", n.alloc.a.base, backend.ErrInvalidValue)
		}
	})
	return err
}

func (c *Context) assignDefaults(x *graph) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range x.handles {
		if h.assign {
			h.value = h.defaultValue
		}
	}
}

func (c *Context) condValue(h *condHandle) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return h.value
}

func (c *Context) runConditional(n *condNode) error {
	switch n.typ {
	case backend.CondIf:
		if c.condValue(n.handle) != 0 {
			return c.runGraph(n.bodies[0])
		}
		if len(n.bodies) == 2 {
			return c.runGraph(n.bodies[1])
		}
	case backend.CondSwitch:
		if v := c.condValue(n.handle); uint64(v) < uint64(len(n.bodies)) {
			return c.runGraph(n.bodies[v])
		}
	case backend.CondWhile:
		for i := 0; c.condValue(n.handle) != 0; i++ {
			if i == maxIterations {
				return fmt.Errorf("a WHILE node ran %d times: %w", i, backend.ErrLaunchFailed)
			}
			if err := c.runGraph(n.bodies[0]); err != nil {
				return err
			}
		}
	}
	return nil
}

// setConditional is cudaGraphSetConditional from a built-in kernel.
func (c *Context) setConditional(h uint64, v uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.fam.conds[h]
	if !ok {
		return fmt.Errorf("cudaGraphSetConditional on %#x, not a conditional handle: %w", h, backend.ErrIllegalAddress)
	}
	ch.value = v
	return nil
}

func (c *Context) GraphConditionalHandleCreate(h backend.Handle, defaultValue, flags uint32) (uint64, error) {
	if flags&^1 != 0 {
		return 0, fmt.Errorf("conditional handle flags %#x: %w", flags, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("conditional handle on graph %d: %w", h, backend.ErrInvalidHandle)
	}
	ch := &condHandle{id: condHandleTag | uint64(c.handle()), graph: g, defaultValue: defaultValue, assign: flags&1 != 0}
	if c.fam.conds == nil {
		c.fam.conds = map[uint64]*condHandle{}
	}
	c.fam.conds[ch.id] = ch
	g.handles = append(g.handles, ch)
	return ch.id, nil
}

// condHandleTag makes handle values unlike node or graph ids, as the driver's are opaque values.
const condHandleTag = 0xc0d0 << 48

func (c *Context) GraphAddConditionalNode(h backend.Handle, deps []backend.Handle, p backend.ConditionalNode) (backend.Handle, []backend.Handle, error) {
	if !p.Valid() {
		return 0, nil, fmt.Errorf("conditional node of type %d with %d bodies: %w", p.Type, p.Size, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	ch, ok := c.fam.conds[p.Handle]
	g := c.fam.graphs[h]
	ok = ok && g != nil && sameRoot(ch.graph, g)
	c.mu.Unlock()
	if !ok {
		return 0, nil, fmt.Errorf("conditional node on handle %#x: not a handle of graph %d: %w", p.Handle, h, backend.ErrInvalidValue)
	}
	cn := &condNode{handle: ch, typ: p.Type}
	node, err := c.addChecked(h, nodeCond, deps, nil)
	if err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	bodies := make([]backend.Handle, p.Size)
	for i := range bodies {
		b := &graph{owned: true}
		cn.bodies = append(cn.bodies, b)
		bodies[i] = c.keepGraph(b)
	}
	g.nodes[len(g.nodes)-1].cond = cn
	return node, bodies, nil
}

// sameRoot says whether graph g is root or one of its conditional bodies, at any depth: a handle
// of a graph serves the conditional nodes of its bodies too. c.mu held.
func sameRoot(root, g *graph) bool {
	if root == g {
		return true
	}
	found := false
	walk(root, func(n *graphNode) {
		if n.cond != nil && slices.Contains(n.cond.bodies, g) {
			found = true
		}
	})
	return found
}

func (c *Context) GraphAddMemAllocNode(h backend.Handle, deps []backend.Handle, p backend.AllocProps) (backend.Handle, uint64, error) {
	if total := c.b.devices[c.ordinal].TotalMemory; p.Size > total {
		return 0, 0, fmt.Errorf("allocation node of %d bytes on a device of %d: %w", p.Size, total, backend.ErrOutOfMemory)
	}
	if p.Type != 1 || p.LocationType != 1 || p.LocationID != 0 || p.HandleTypes != 0 || p.Size == 0 {
		return 0, 0, fmt.Errorf("allocation node of %d bytes, type %d at %d/%d, handle types %#x: pinned device memory of the current device: %w",
			p.Size, p.Type, p.LocationType, p.LocationID, p.HandleTypes, backend.ErrInvalidValue)
	}
	ga := c.graphAllocation(p.Size)
	node, err := c.addChecked(h, nodeMemAlloc, deps, func() error { return c.mapGraphAlloc(ga) })
	if err != nil {
		c.mem.drop(ga.a.base)
		return 0, 0, err
	}
	c.mu.Lock()
	c.fam.graphs[h].nodes[len(c.fam.graphs[h].nodes)-1].alloc = ga
	c.mu.Unlock()
	return node, ga.a.base, nil
}

// graphAllocation reserves an address range for an allocation node; nothing is there until the
// node runs (the range reads as unallocated).
func (c *Context) graphAllocation(size uint64) *graphAlloc {
	a := &allocation{mapped: true, access: true}
	c.mem.placeRange(a, size)
	ga := &graphAlloc{a: a, size: size}
	c.mu.Lock()
	if c.fam.graphAllocs == nil {
		c.fam.graphAllocs = map[uint64]*graphAlloc{}
	}
	c.fam.graphAllocs[a.base] = ga
	c.mu.Unlock()
	return ga
}

// mapGraphAlloc is an allocation node's execution: memory from the graphs' pool, which grows
// from the device as needed.
func (c *Context) mapGraphAlloc(ga *graphAlloc) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ga.live {
		return fmt.Errorf("graph allocation %#x is already allocated: %w", ga.a.base, backend.ErrInvalidValue)
	}
	m := &c.fam.graphMem
	if m.used+ga.size > m.reserved {
		if err := c.b.reserve(c.ordinal, m.used+ga.size-m.reserved); err != nil {
			return fmt.Errorf("graph allocation of %d bytes: %w", ga.size, err)
		}
		m.reserved = m.used + ga.size
	}
	m.used += ga.size
	m.usedHigh, m.reservedHigh = max(m.usedHigh, m.used), max(m.reservedHigh, m.reserved)
	c.mem.setData(ga.a, make([]byte, ga.size))
	ga.live = true
	return nil
}

// unmapGraphAlloc frees a graph allocation into the graphs' pool. c.mu held.
func (c *Context) unmapGraphAlloc(ga *graphAlloc) error {
	if !ga.live {
		return fmt.Errorf("free of graph allocation %#x, which is not allocated: %w", ga.a.base, backend.ErrInvalidValue)
	}
	ga.live = false
	c.fam.graphMem.used -= ga.size
	c.mem.setData(ga.a, nil)
	return nil
}

// graphAllocAt is the graph allocation at ptr, or nil. c.mu held.
func (c *Context) graphAllocAt(ptr uint64) *graphAlloc { return c.fam.graphAllocs[ptr] }

func (c *Context) GraphAddMemFreeNode(h backend.Handle, deps []backend.Handle, ptr uint64) (backend.Handle, error) {
	c.mu.Lock()
	ga := c.graphAllocAt(ptr)
	c.mu.Unlock()
	if ga == nil {
		return 0, fmt.Errorf("free node of %#x: not a graph allocation: %w", ptr, backend.ErrInvalidValue)
	}
	return c.addChecked(h, nodeMemFree, deps, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.unmapGraphAlloc(ga)
	})
}

func (c *Context) GraphAllocBytes(h backend.Handle) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("graph %d: %w", h, backend.ErrInvalidHandle)
	}
	var n uint64
	walk(g, func(nd *graphNode) {
		if nd.alloc != nil {
			n = backend.SaturatingAdd(n, nd.alloc.size)
		}
	})
	return n, nil
}

func (c *Context) DeviceGraphMemTrim() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.fam.graphMem
	if m.reserved > m.used {
		c.b.release(c.ordinal, m.reserved-m.used)
		m.reserved = m.used
	}
	return nil
}

func (c *Context) DeviceGraphMemAttribute(attr uint32) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.fam.graphMem
	switch attr {
	case backend.GraphMemUsed:
		return m.used, nil
	case backend.GraphMemUsedHigh:
		return m.usedHigh, nil
	case backend.GraphMemReserved:
		return m.reserved, nil
	case backend.GraphMemReservedHigh:
		return m.reservedHigh, nil
	}
	return 0, fmt.Errorf("graph memory attribute %d: %w", attr, backend.ErrInvalidValue)
}

func (c *Context) DeviceSetGraphMemAttribute(attr uint32, v uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case v != 0:
		return fmt.Errorf("graph memory attribute %d set to %d (only to 0): %w", attr, v, backend.ErrInvalidValue)
	case attr == backend.GraphMemUsedHigh:
		c.fam.graphMem.usedHigh = 0
	case attr == backend.GraphMemReservedHigh:
		c.fam.graphMem.reservedHigh = 0
	default:
		return fmt.Errorf("graph memory attribute %d cannot be set: %w", attr, backend.ErrInvalidValue)
	}
	return nil
}

// nodesOf checks that deps are distinct nodes of g. c.mu held.
func nodesOf(g *graph, deps []backend.Handle) error {
	for i, d := range deps {
		if !slices.ContainsFunc(g.nodes, func(n *graphNode) bool { return n.id == d }) || slices.Contains(deps[:i], d) {
			return fmt.Errorf("dependency %d: not a node of the graph, or repeated: %w", d, backend.ErrInvalidValue)
		}
	}
	return nil
}

func (c *Context) StreamBeginCaptureToGraph(h, gh backend.Handle, deps []backend.Handle, mode uint32) error {
	if err := c.StreamBeginCapture(h, mode); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.fam.captures[h]
	g, ok := c.fam.graphs[gh]
	var err error
	if !ok {
		err = fmt.Errorf("capture into graph %d: %w", gh, backend.ErrInvalidHandle)
	} else {
		err = nodesOf(g, deps)
	}
	delete(c.fam.graphs, cp.gh) // the graph StreamBeginCapture made
	if err != nil {
		delete(c.fam.captures, h)
		return err
	}
	cp.g, cp.gh, cp.toGraph, cp.deps = g, gh, true, slices.Clone(deps)
	return nil
}

func (c *Context) StreamCaptureGraph(h backend.Handle) (backend.CaptureGraph, error) {
	ci, err := c.StreamCaptureInfo(h)
	if err != nil || ci.Status != 1 {
		return backend.CaptureGraph{CaptureInfo: ci}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.fam.captures[h]
	return backend.CaptureGraph{CaptureInfo: ci, Graph: cp.gh, Deps: slices.Clone(cp.deps)}, nil
}

func (c *Context) StreamUpdateCaptureDependencies(h backend.Handle, deps []backend.Handle, flags uint32) error {
	return c.inCapture(h, "update of capture dependencies", func(cp *capture) error {
		if flags > 1 {
			return fmt.Errorf("capture dependency flags %#x: %w", flags, backend.ErrInvalidValue)
		}
		if err := nodesOf(cp.g, deps); err != nil {
			return err
		}
		if flags == 1 {
			cp.deps = nil
		}
		for _, d := range deps {
			if !slices.Contains(cp.deps, d) {
				cp.deps = append(cp.deps, d)
			}
		}
		return nil
	})
}

// captureAlloc makes a stream-ordered allocation on a capturing stream an allocation node of the
// capture, as the driver does; ok is false when the stream is not capturing.
func (c *Context) captureAlloc(h backend.Handle, bytes uint64) (ptr uint64, ok bool, err error) {
	c.mu.Lock()
	_, capturing := c.fam.captures[h]
	c.mu.Unlock()
	if !capturing {
		return 0, false, nil
	}
	ga := c.graphAllocation(bytes)
	if _, err := c.captured(nodeMemAlloc, h, func() error { return c.mapGraphAlloc(ga) }); err != nil {
		return 0, true, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp := c.fam.captures[h]; cp != nil {
		cp.g.nodes[len(cp.g.nodes)-1].alloc = ga
	}
	return ga.a.base, true, nil
}

// freeGraphAlloc frees a graph allocation outside a graph: a free node when the stream captures,
// else when the stream reaches it (stream 0 with sync: at once, for cuMemFree). ok is false when
// ptr is not a graph allocation.
func (c *Context) freeGraphAlloc(ptr uint64, h backend.Handle, sync bool) (ok bool, err error) {
	c.mu.Lock()
	ga := c.graphAllocAt(ptr)
	c.mu.Unlock()
	if ga == nil {
		return false, nil
	}
	free := func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.unmapGraphAlloc(ga)
	}
	if sync {
		return true, free()
	}
	return true, c.runKind(nodeMemFree, h, true, free)
}

// inGraphAlloc says whether any of ptrs lies in a graph allocation's range.
func (c *Context) inGraphAlloc(ptrs ...uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ga := range c.fam.graphAllocs {
		for _, p := range ptrs {
			if p >= ga.a.base && p-ga.a.base < ga.size {
				return true
			}
		}
	}
	return false
}

// deferredWork is build's work, or, when the memory at ptrs is a graph allocation's (which has
// memory only between its allocation node and its free), work that builds it when it runs: the
// memory is looked up then, and missing memory is the fault a GPU would report.
func (c *Context) deferredWork(build func() (func() error, error), ptrs ...uint64) (func() error, error) {
	if !c.inGraphAlloc(ptrs...) {
		return build()
	}
	return func() error {
		fn, err := build()
		if err != nil {
			return fmt.Errorf("%w (%w)", backend.ErrIllegalAddress, err)
		}
		return fn()
	}, nil
}

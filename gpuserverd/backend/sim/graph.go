package sim

import (
	"encoding/binary"
	"fmt"
	"slices"

	"gpucloud/gpuserverd/backend"
)

// CUgraphNodeType numbers, and uncapturable: work a capture cannot hold.
const (
	uncapturable = -1
	nodeKernel   = 0
	nodeMemcpy   = 1
	nodeMemset   = 2
	nodeHost     = 3
	nodeGraph    = 4
	nodeEmpty    = 5
	nodeMemAlloc = 10
	nodeMemFree  = 11
	nodeCond     = 13
)

type graphNode struct {
	id    backend.Handle
	kind  uint32
	deps  []backend.Handle
	work  func() error   // nil for an empty, host or conditional node
	host  backend.HostFn // a host node's function (run by the guest)
	cond  *condNode      // a conditional node's handle and bodies
	alloc *graphAlloc    // an allocation node's memory
}

// graph is a CUDA graph: nodes in the order added, which is a topological order (a node's
// dependencies exist when it is added). An executable graph is a snapshot of one (snapshot).
type graph struct {
	nodes   []*graphNode
	handles []*condHandle                     // conditional handles created on it
	owned   bool                              // a conditional node's body: it goes with the node, not by GraphDestroy
	cloneOf map[backend.Handle]backend.Handle // a clone's: node of the cloned graph -> node here
}

// capture is a stream's capture in progress: each captured call becomes a node depending on the
// capture's dependency set (deps), which then is that node alone (a stream is a chain).
type capture struct {
	id      uint64
	mode    uint32 // CU_STREAM_CAPTURE_MODE_*: 0 global, 1 thread-local, 2 relaxed
	g       *graph
	gh      backend.Handle // g's handle
	toGraph bool           // captures into an existing graph (StreamBeginCaptureToGraph)
	deps    []backend.Handle
	invalid bool
}

// captured records fn as a node when stream h is capturing; it reports whether it did, and the
// error a capture gives work it cannot hold (which also invalidates the capture).
func (c *Context) captured(kind int, h backend.Handle, fn func() error) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.fam.captures[h]
	if !ok {
		return false, nil
	}
	if kind == uncapturable || cp.invalid {
		cp.invalid = true
		return true, fmt.Errorf("stream %d is capturing: %w", h, backend.ErrStreamCaptureUnsupported)
	}
	cp.deps = []backend.Handle{c.addNode(cp.g, uint32(kind), cp.deps, fn)}
	return true, nil
}

// inCapture runs fn, with c.mu held, on the capture in progress on stream h; what names the call
// for the error when h is not capturing.
func (c *Context) inCapture(h backend.Handle, what string, fn func(cp *capture) error) error {
	if _, err := c.stream(h); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.fam.captures[h]
	if !ok {
		return fmt.Errorf("%s on stream %d, which is not capturing: %w", what, h, backend.ErrIllegalState)
	}
	return fn(cp)
}

// addNode appends a node to g. c.mu held.
func (c *Context) addNode(g *graph, kind uint32, deps []backend.Handle, fn func() error) backend.Handle {
	n := &graphNode{id: c.handle(), kind: kind, deps: deps, work: fn}
	g.nodes = append(g.nodes, n)
	return n.id
}

func (c *Context) StreamBeginCapture(h backend.Handle, mode uint32) error {
	if _, err := c.stream(h); err != nil {
		return err
	}
	if h == 0 {
		return fmt.Errorf("capture of the legacy default stream: %w", backend.ErrStreamCaptureUnsupported)
	}
	if mode > 2 {
		return fmt.Errorf("capture mode %d: %w", mode, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fam.captures[h]; ok {
		return fmt.Errorf("stream %d is already capturing: %w", h, backend.ErrIllegalState)
	}
	if c.fam.captures == nil {
		c.fam.captures = map[backend.Handle]*capture{}
	}
	c.fam.nextCapture++
	g := &graph{}
	c.fam.captures[h] = &capture{id: c.fam.nextCapture, mode: mode, g: g, gh: c.keepGraph(g)}
	return nil
}

// globalCapture says whether a capture begun in global mode is under way: NVIDIA's driver then
// refuses potentially unsafe calls (cuMemAlloc among them) from every thread whose own mode is not
// relaxed, and the simulation does so for all (it serves one thread's worth of calls).
func (c *Context) globalCapture() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cp := range c.fam.captures {
		if cp.mode == 0 {
			return true
		}
	}
	return false
}

func (c *Context) StreamEndCapture(h backend.Handle) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.fam.captures[h]
	if !ok {
		return 0, fmt.Errorf("end of capture on stream %d, which is not capturing: %w", h, backend.ErrIllegalState)
	}
	delete(c.fam.captures, h)
	if cp.invalid {
		if !cp.toGraph {
			delete(c.fam.graphs, cp.gh)
		}
		return 0, fmt.Errorf("capture on stream %d: %w", h, backend.ErrStreamCaptureInvalidated)
	}
	return cp.gh, nil
}

// keepGraph gives g a handle. c.mu held.
func (c *Context) keepGraph(g *graph) backend.Handle {
	if c.fam.graphs == nil {
		c.fam.graphs = map[backend.Handle]*graph{}
	}
	h := c.handle()
	c.fam.graphs[h] = g
	return h
}

func (c *Context) StreamCaptureInfo(h backend.Handle) (backend.CaptureInfo, error) {
	if _, err := c.stream(h); err != nil {
		return backend.CaptureInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.fam.captures[h]
	switch {
	case !ok:
		return backend.CaptureInfo{}, nil
	case cp.invalid:
		return backend.CaptureInfo{Status: 2, ID: cp.id}, nil
	}
	return backend.CaptureInfo{Status: 1, ID: cp.id}, nil
}

func (c *Context) GraphCreate(flags uint32) (backend.Handle, error) {
	if flags != 0 {
		return 0, fmt.Errorf("graph flags %d: %w", flags, backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keepGraph(&graph{}), nil
}

func (c *Context) GraphDestroy(h backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return fmt.Errorf("destroy of graph %d: %w", h, backend.ErrInvalidHandle)
	}
	if g.owned {
		return fmt.Errorf("destroy of graph %d, a conditional node's body (it goes with its node): %w", h, backend.ErrInvalidValue)
	}
	for _, cp := range c.fam.captures {
		if cp.gh == h {
			return fmt.Errorf("destroy of graph %d while a stream captures into it: %w", h, backend.ErrIllegalState)
		}
	}
	c.forgetGraph(g)
	delete(c.fam.graphs, h)
	return nil
}

// addChecked adds a node after checking its graph and dependencies.
func (c *Context) addChecked(h backend.Handle, kind uint32, deps []backend.Handle, fn func() error) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("graph %d: %w", h, backend.ErrInvalidHandle)
	}
	for i, d := range deps {
		if !slices.ContainsFunc(g.nodes, func(n *graphNode) bool { return n.id == d }) || slices.Contains(deps[:i], d) {
			return 0, fmt.Errorf("dependency %d: not a node of graph %d, or repeated: %w", d, h, backend.ErrInvalidValue)
		}
	}
	return c.addNode(g, kind, slices.Clone(deps), fn), nil
}

func (c *Context) GraphAddKernelNode(h backend.Handle, deps []backend.Handle, cfg backend.LaunchConfig) (backend.Handle, error) {
	fn, err := c.kernelWork(cfg)
	if err != nil {
		return 0, err
	}
	return c.addChecked(h, nodeKernel, deps, fn)
}

func (c *Context) GraphAddMemsetNode(h backend.Handle, deps []backend.Handle, p backend.MemsetNode) (backend.Handle, error) {
	fn, err := c.memsetWork(p)
	if err != nil {
		return 0, err
	}
	return c.addChecked(h, nodeMemset, deps, fn)
}

// memsetWork checks a memset node's parameters and returns the work that does it.
func (c *Context) memsetWork(p backend.MemsetNode) (func() error, error) {
	if p.ElemSize != 1 && p.ElemSize != 2 && p.ElemSize != 4 || p.Width == 0 || p.Height == 0 ||
		(p.Height > 1 && p.Pitch < p.Width*uint64(p.ElemSize)) {
		return nil, fmt.Errorf("memset node %dx%d of %d-byte elements, pitch %d: %w", p.Width, p.Height, p.ElemSize, p.Pitch, backend.ErrInvalidValue)
	}
	var pat [4]byte
	binary.LittleEndian.PutUint32(pat[:], p.Value)
	return c.deferredWork(func() (func() error, error) {
		rows, err := c.rows(backend.CopySide{Kind: backend.SideDevice, Ptr: p.Dst, Pitch: max(p.Pitch, p.Width*uint64(p.ElemSize))},
			nil, p.Width*uint64(p.ElemSize), p.Height, 1)
		return func() error {
			for _, r := range rows {
				for i := 0; i < len(r); i += int(p.ElemSize) {
					copy(r[i:], pat[:p.ElemSize])
				}
			}
			return nil
		}, err
	}, p.Dst)
}

func (c *Context) GraphAddMemcpyNode(h backend.Handle, deps []backend.Handle, cp backend.Copy3D) (backend.Handle, error) {
	fn, err := c.memcpyNodeWork(cp)
	if err != nil {
		return 0, err
	}
	return c.addChecked(h, nodeMemcpy, deps, fn)
}

// memcpyNodeWork checks a memcpy node's copy (device and array sides) and returns its work.
func (c *Context) memcpyNodeWork(cp backend.Copy3D) (func() error, error) {
	if cp.Src.Kind == backend.SideHost || cp.Dst.Kind == backend.SideHost {
		return nil, fmt.Errorf("memcpy node with host memory (it lies in the guest): %w", backend.ErrNotSupported)
	}
	return c.deferredWork(func() (func() error, error) { return c.copyWork(cp) }, cp.Src.Ptr, cp.Dst.Ptr)
}

func (c *Context) GraphAddEmptyNode(h backend.Handle, deps []backend.Handle) (backend.Handle, error) {
	return c.addChecked(h, nodeEmpty, deps, nil)
}

func (c *Context) GraphNodes(h backend.Handle) ([]backend.Handle, []uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return nil, nil, fmt.Errorf("graph %d: %w", h, backend.ErrInvalidHandle)
	}
	ids, kinds := make([]backend.Handle, len(g.nodes)), make([]uint32, len(g.nodes))
	for i, n := range g.nodes {
		ids[i], kinds[i] = n.id, n.kind
	}
	return ids, kinds, nil
}

func (c *Context) GraphInstantiate(h backend.Handle, flags uint64) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("instantiate graph %d: %w", h, backend.ErrInvalidHandle)
	}
	if flags&^0xf != 0 {
		return 0, fmt.Errorf("instantiate flags %#x: %w", flags, backend.ErrInvalidValue)
	}
	if c.fam.execs == nil {
		c.fam.execs = map[backend.Handle]*graph{}
	}
	e := c.handle()
	c.fam.execs[e] = snapshot(g)
	return e, nil
}

// GraphLaunch runs the executable graph's nodes on the stream, in their (topological) order.
func (c *Context) GraphLaunch(e, h backend.Handle) error {
	c.mu.Lock()
	x, ok := c.fam.execs[e]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("launch of executable graph %d: %w", e, backend.ErrInvalidHandle)
	}
	if err := c.allocsFreed(x); err != nil {
		return err
	}
	return c.runKind(nodeGraph, h, true, func() error {
		c.assignDefaults(x)
		return c.runGraph(x)
	})
}

// runGraph runs g's nodes in their (topological) order; a conditional node runs its bodies.
func (c *Context) runGraph(g *graph) error {
	for _, n := range g.nodes {
		var err error
		switch {
		case n.cond != nil:
			err = c.runConditional(n.cond)
		case n.work != nil:
			err = n.work()
		}
		if err != nil {
			return fmt.Errorf("graph node %d: %w", n.id, err)
		}
	}
	return nil
}

func (c *Context) GraphExecDestroy(e backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fam.execs[e]; !ok {
		return fmt.Errorf("destroy of executable graph %d: %w", e, backend.ErrInvalidHandle)
	}
	delete(c.fam.execs, e)
	return nil
}

// GraphExecUpdate takes g's node parameters into the executable graph when both have the same
// shape: node kinds, in order, with the same dependencies by position.
func (c *Context) GraphExecUpdate(e, h backend.Handle) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x, ok := c.fam.execs[e]
	g, ok2 := c.fam.graphs[h]
	if !ok || !ok2 {
		return 0, fmt.Errorf("update of executable graph %d from graph %d: %w", e, h, backend.ErrInvalidHandle)
	}
	const topologyChanged, typeChanged = 2, 3
	if len(x.nodes) != len(g.nodes) {
		return topologyChanged, fmt.Errorf("update: %d nodes for %d: %w", len(g.nodes), len(x.nodes), backend.ErrGraphExecUpdateFailure)
	}
	pos := func(nodes []*graphNode, id backend.Handle) int {
		return slices.IndexFunc(nodes, func(n *graphNode) bool { return n.id == id })
	}
	for i, n := range g.nodes {
		o := x.nodes[i]
		if n.kind != o.kind {
			return typeChanged, fmt.Errorf("update: node %d changed type: %w", i, backend.ErrGraphExecUpdateFailure)
		}
		if len(n.deps) != len(o.deps) {
			return topologyChanged, fmt.Errorf("update: node %d changed dependencies: %w", i, backend.ErrGraphExecUpdateFailure)
		}
		for j := range n.deps {
			if pos(g.nodes, n.deps[j]) != pos(x.nodes, o.deps[j]) {
				return topologyChanged, fmt.Errorf("update: node %d changed dependencies: %w", i, backend.ErrGraphExecUpdateFailure)
			}
		}
	}
	x.nodes = snapshot(g).nodes
	return 0, nil
}

// LaunchKernelEx is a launch with attributes: a cooperative launch must fit on the device at
// once; clusters must tile the grid and hold at most 8 blocks (the portable limit).
func (c *Context) LaunchKernelEx(cfg backend.LaunchConfig, ex backend.LaunchEx) error {
	if ex.Cooperative {
		per, err := c.OccupancyMaxActiveBlocks(cfg.Function, int32(cfg.Block[0]*cfg.Block[1]*cfg.Block[2]), uint64(cfg.SharedMemBytes), 0)
		if err != nil {
			return err
		}
		blocks := uint64(cfg.Grid[0]) * uint64(cfg.Grid[1]) * uint64(cfg.Grid[2])
		if blocks > uint64(per)*uint64(attributes[16]) {
			return fmt.Errorf("cooperative launch of %d blocks, %d fit at once: %w", blocks, uint64(per)*uint64(attributes[16]), backend.ErrCooperativeLaunchTooLarge)
		}
	}
	if ex.Cluster != [3]uint32{} {
		size := uint64(1)
		for i, d := range ex.Cluster {
			if d == 0 || cfg.Grid[i]%d != 0 {
				return fmt.Errorf("cluster %v does not tile grid %v: %w", ex.Cluster, cfg.Grid, backend.ErrInvalidValue)
			}
			size *= uint64(d)
		}
		if size > 8 {
			return fmt.Errorf("cluster of %d blocks (at most 8): %w", size, backend.ErrInvalidValue)
		}
	}
	return c.LaunchKernel(cfg)
}

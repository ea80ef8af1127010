package sim

import (
	"fmt"
	"slices"

	"gpucloud/gpuserverd/backend"
)

var _ backend.GraphEdits = (*Context)(nil)

// nodeAt finds node id in the graphs (not in executable graphs): its graph and index. c.mu held.
func (c *Context) nodeAt(id backend.Handle) (*graph, int, bool) {
	for _, g := range c.fam.graphs {
		if i := slices.IndexFunc(g.nodes, func(n *graphNode) bool { return n.id == id }); i >= 0 {
			return g, i, true
		}
	}
	return nil, 0, false
}

func (c *Context) GraphAddHostNode(h backend.Handle, deps []backend.Handle, fn backend.HostFn) (backend.Handle, error) {
	if fn.Fn == 0 {
		return 0, fmt.Errorf("host node without a function: %w", backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("graph %d: %w", h, backend.ErrInvalidHandle)
	}
	if err := nodesOf(g, deps); err != nil {
		return 0, err
	}
	id := c.addNode(g, nodeHost, slices.Clone(deps), nil)
	g.nodes[len(g.nodes)-1].host = fn
	return id, nil
}

func (c *Context) StreamCaptureHostFunc(h backend.Handle, fn backend.HostFn) error {
	return c.inCapture(h, "host function captured", func(cp *capture) error {
		switch {
		case cp.invalid:
			return fmt.Errorf("stream %d: %w", h, backend.ErrStreamCaptureInvalidated)
		case fn.Fn == 0:
			return fmt.Errorf("host function without a function: %w", backend.ErrInvalidValue)
		}
		id := c.addNode(cp.g, nodeHost, cp.deps, nil)
		cp.g.nodes[len(cp.g.nodes)-1].host = fn
		cp.deps = []backend.Handle{id}
		return nil
	})
}

func (c *Context) GraphHostNode(node backend.Handle) (backend.HostFn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, i, ok := c.nodeAt(node)
	if !ok || g.nodes[i].kind != nodeHost {
		return backend.HostFn{}, fmt.Errorf("node %d is no host node: %w", node, backend.ErrInvalidValue)
	}
	return g.nodes[i].host, nil
}

func (c *Context) GraphEdges(h backend.Handle) (from, to []backend.Handle, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return nil, nil, fmt.Errorf("graph %d: %w", h, backend.ErrInvalidHandle)
	}
	for _, n := range g.nodes {
		for _, d := range n.deps {
			from, to = append(from, d), append(to, n.id)
		}
	}
	return from, to, nil
}

// GraphClone copies a graph with new node ids. As the driver, it refuses graphs with allocation
// or free nodes (an allocation's address is its node's alone); conditional nodes are refused too.
func (c *Context) GraphClone(h backend.Handle) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.fam.graphs[h]
	if !ok {
		return 0, fmt.Errorf("clone of graph %d: %w", h, backend.ErrInvalidHandle)
	}
	for _, n := range g.nodes {
		if n.kind == nodeMemAlloc || n.kind == nodeMemFree || n.kind == nodeCond {
			return 0, fmt.Errorf("clone of graph %d with a node of type %d: %w", h, n.kind, backend.ErrNotSupported)
		}
	}
	cl := &graph{nodes: make([]*graphNode, len(g.nodes)), cloneOf: map[backend.Handle]backend.Handle{}}
	for i, n := range g.nodes {
		cp := *n
		cp.id = c.handle()
		cp.deps = make([]backend.Handle, len(n.deps))
		for j, d := range n.deps {
			cp.deps[j] = cl.cloneOf[d] // dependencies come first
		}
		cl.nodes[i], cl.cloneOf[n.id] = &cp, cp.id
	}
	return c.keepGraph(cl), nil
}

func (c *Context) GraphNodeFindInClone(node, clone backend.Handle) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.fam.graphs[clone]
	if !ok {
		return 0, fmt.Errorf("clone %d: %w", clone, backend.ErrInvalidHandle)
	}
	id, ok := cl.cloneOf[node]
	if !ok || !slices.ContainsFunc(cl.nodes, func(n *graphNode) bool { return n.id == id }) {
		return 0, fmt.Errorf("node %d has no clone in graph %d: %w", node, clone, backend.ErrInvalidValue)
	}
	return id, nil
}

func (c *Context) GraphDestroyNode(node backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, i, ok := c.nodeAt(node)
	if !ok {
		return fmt.Errorf("destroy of node %d: %w", node, backend.ErrInvalidValue)
	}
	if n := g.nodes[i]; n.cond != nil || n.alloc != nil {
		return fmt.Errorf("destroy of node %d of type %d: %w", node, n.kind, backend.ErrNotSupported)
	}
	for _, cp := range c.fam.captures {
		if cp.g == g {
			return fmt.Errorf("destroy of node %d while a stream captures into its graph: %w", node, backend.ErrIllegalState)
		}
	}
	g.nodes = slices.Delete(g.nodes, i, i+1)
	for _, n := range g.nodes {
		n.deps = slices.DeleteFunc(n.deps, func(d backend.Handle) bool { return d == node })
	}
	return nil
}

// execNode is the node of executable graph e that node (of its graph) became, checked to be of
// the kind given. c.mu held.
func (c *Context) execNode(e, node backend.Handle, kind uint32) (*graphNode, error) {
	x, ok := c.fam.execs[e]
	if !ok {
		return nil, fmt.Errorf("executable graph %d: %w", e, backend.ErrInvalidHandle)
	}
	var found *graphNode
	walk(x, func(n *graphNode) {
		if n.id == node {
			found = n
		}
	})
	if found == nil || found.kind != kind {
		return nil, fmt.Errorf("node %d of executable graph %d: not a node of type %d there: %w", node, e, kind, backend.ErrInvalidValue)
	}
	return found, nil
}

// setExecWork gives an executable graph's node new work, built (outside c.mu) by build.
func (c *Context) setExecWork(e, node backend.Handle, kind uint32, build func() (func() error, error)) error {
	fn, err := build()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.execNode(e, node, kind)
	if err != nil {
		return err
	}
	n.work = fn
	return nil
}

func (c *Context) GraphExecKernelNodeSetParams(e, node backend.Handle, cfg backend.LaunchConfig) error {
	return c.setExecWork(e, node, nodeKernel, func() (func() error, error) { return c.kernelWork(cfg) })
}

func (c *Context) GraphExecMemsetNodeSetParams(e, node backend.Handle, p backend.MemsetNode) error {
	return c.setExecWork(e, node, nodeMemset, func() (func() error, error) { return c.memsetWork(p) })
}

func (c *Context) GraphExecMemcpyNodeSetParams(e, node backend.Handle, cp backend.Copy3D) error {
	return c.setExecWork(e, node, nodeMemcpy, func() (func() error, error) { return c.memcpyNodeWork(cp) })
}

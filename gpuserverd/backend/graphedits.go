package backend

// HostFn is a host node's function and its argument: pointers of the guest process, opaque here
// (the guest runs the function; the worker only keeps them).
type HostFn struct {
	Fn, Data uint64
}

// CUgraphNodeType numbers the worker tells apart.
const (
	NodeHost     = 3
	NodeGraph    = 4
	NodeMemAlloc = 10
	NodeMemFree  = 11
	NodeCond     = 13
)

// GraphEdits is what running graphs with host nodes and changing graphs takes: host nodes (made
// by hand or by a capture of cuLaunchHostFunc), the graph's edges, clones and node removal (the
// worker splits a graph with host nodes into stages of clones), and the parameter updates of an
// executable graph's nodes.
type GraphEdits interface {
	GraphAddHostNode(g Handle, deps []Handle, fn HostFn) (Handle, error)
	// StreamCaptureHostFunc adds a host node to the capture on stream, which must be capturing.
	StreamCaptureHostFunc(stream Handle, fn HostFn) error
	GraphHostNode(node Handle) (HostFn, error)
	// GraphEdges lists g's edges: from[i] -> to[i].
	GraphEdges(g Handle) (from, to []Handle, err error)
	GraphClone(g Handle) (Handle, error)
	GraphNodeFindInClone(node, clone Handle) (Handle, error)
	// GraphDestroyNode removes a node and its edges from its graph.
	GraphDestroyNode(node Handle) error
	GraphExecKernelNodeSetParams(exec, node Handle, cfg LaunchConfig) error
	GraphExecMemsetNodeSetParams(exec, node Handle, p MemsetNode) error
	GraphExecMemcpyNodeSetParams(exec, node Handle, c Copy3D) error
}

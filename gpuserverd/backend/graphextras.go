package backend

// ConditionalNode is a conditional node's parameters (CUDA_CONDITIONAL_NODE_PARAMS): Type 0 IF
// (one body, or two with an ELSE), 1 WHILE (one body), 2 SWITCH (Size bodies).
type ConditionalNode struct {
	Handle uint64 // a CUgraphConditionalHandle of the same graph
	Type   uint32
	Size   uint32
}

// Conditional node types, CUgraphConditionalNodeType.
const (
	CondIf     = 0
	CondWhile  = 1
	CondSwitch = 2
)

// Valid checks a conditional node's type and body count as the driver documents them.
func (p ConditionalNode) Valid() bool {
	switch p.Type {
	case CondIf:
		return p.Size == 1 || p.Size == 2
	case CondWhile:
		return p.Size == 1
	case CondSwitch:
		return p.Size >= 1 && p.Size <= MaxConditionalBodies
	}
	return false
}

// MaxConditionalBodies is the most body graphs a SWITCH node may have here (a reply lists them).
const MaxConditionalBodies = 8192

// CaptureGraph is a capture in progress: its status and id, the graph it captures into and the
// nodes the next captured work will depend on.
type CaptureGraph struct {
	CaptureInfo
	Graph Handle
	Deps  []Handle
}

// GraphExtras is what CUDA 12 added to graphs: conditional nodes (on handles that device code
// sets), memory allocation and free nodes with the device's graph memory, and capture into an
// existing graph with its dependency set read and changed.
type GraphExtras interface {
	// GraphConditionalHandleCreate returns the driver's handle value itself (kernels take it).
	GraphConditionalHandleCreate(g Handle, defaultValue, flags uint32) (uint64, error)
	// GraphAddConditionalNode returns the node and its body graphs (owned by the node).
	GraphAddConditionalNode(g Handle, deps []Handle, p ConditionalNode) (Handle, []Handle, error)
	// GraphAddMemAllocNode returns the node and the allocation's address.
	GraphAddMemAllocNode(g Handle, deps []Handle, p AllocProps) (Handle, uint64, error)
	GraphAddMemFreeNode(g Handle, deps []Handle, ptr uint64) (Handle, error)
	// GraphAllocBytes is the sum of g's allocation nodes' sizes, body and child graphs included:
	// the most device memory one launch of it can hold.
	GraphAllocBytes(g Handle) (uint64, error)
	DeviceGraphMemTrim() error
	DeviceGraphMemAttribute(attr uint32) (uint64, error)
	DeviceSetGraphMemAttribute(attr uint32, v uint64) error
	StreamBeginCaptureToGraph(stream, g Handle, deps []Handle, mode uint32) error
	StreamCaptureGraph(stream Handle) (CaptureGraph, error)
	// StreamUpdateCaptureDependencies adds deps to the capture's set (flags 0) or replaces it (1).
	StreamUpdateCaptureDependencies(stream Handle, deps []Handle, flags uint32) error
}

// CUgraphMem_attribute numbers.
const (
	GraphMemUsed         = 0
	GraphMemUsedHigh     = 1
	GraphMemReserved     = 2
	GraphMemReservedHigh = 3
)

// SaturatingAdd is a+b, or the largest uint64 past it: sums of sizes a tenant chose must not wrap
// (a quota check would pass a wrapped sum).
func SaturatingAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

package worker

import (
	"encoding/binary"
	"fmt"
	"slices"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// editsReply is the reply a GraphEdits message gets when it fails with err (nil for others).
func editsReply(m wire.Message, err error) wire.Message {
	r := int32(backend.ResultOf(err))
	switch m.(type) {
	case *wire.GraphAddHostNode, *wire.GraphNodeFindInClone:
		return &wire.HandleReply{Result: r}
	case *wire.GraphClone:
		return &wire.GraphCloneReply{Result: r}
	case *wire.GraphExecPlan:
		return &wire.GraphPlanReply{Result: r}
	case *wire.GraphHostNodeGetParams:
		return &wire.GraphHostNodeReply{Result: r}
	case *wire.CaptureHostFunc, *wire.GraphLaunchStage, *wire.GraphExecKernelNodeSetParams,
		*wire.GraphExecMemsetNodeSetParams, *wire.GraphExecMemcpyNodeSetParams, *wire.GraphExecHostNodeSetParams:
		return status(err)
	}
	return nil
}

// maxListed is the most nodes a reply lists (the replies' byte limits).
const maxListed = 8192

// graphEdits answers the GraphEdits messages; ok is false for others.
func (s *Session) graphEdits(d *device, m wire.Message) (wire.Message, bool) {
	if editsReply(m, nil) == nil {
		return nil, false
	}
	ge, ok := d.ctx.(backend.GraphEdits)
	gr, ok2 := d.ctx.(backend.Graphs)
	if !ok || !ok2 {
		return editsReply(m, errNoFamily), true
	}
	switch m := m.(type) {
	case *wire.GraphAddHostNode:
		deps, err := nodeIDs(m.Deps)
		if err != nil {
			return editsReply(m, err), true
		}
		return handleReply(ge.GraphAddHostNode(backend.Handle(m.Graph), deps, backend.HostFn{Fn: m.Fn, Data: m.Data})), true
	case *wire.CaptureHostFunc:
		return status(ge.StreamCaptureHostFunc(backend.Handle(m.Stream), backend.HostFn{Fn: m.Fn, Data: m.Data})), true
	case *wire.GraphHostNodeGetParams:
		fn, err := ge.GraphHostNode(backend.Handle(m.Node))
		return &wire.GraphHostNodeReply{Result: int32(backend.ResultOf(err)), Fn: fn.Fn, Data: fn.Data}, true
	case *wire.GraphClone:
		return s.clone(gr, ge, backend.Handle(m.Graph)), true
	case *wire.GraphNodeFindInClone:
		return handleReply(ge.GraphNodeFindInClone(backend.Handle(m.Node), backend.Handle(m.Clone))), true
	case *wire.GraphExecPlan:
		return planReply(d.fam.staged[backend.Handle(m.Exec)]), true
	case *wire.GraphLaunchStage:
		return status(s.launchStage(d, gr, backend.Handle(m.Exec), backend.Handle(m.Stream), m.Stage)), true
	case *wire.GraphExecHostNodeSetParams:
		return status(s.setExecHost(d, backend.Handle(m.Exec), backend.Handle(m.Node), backend.HostFn{Fn: m.Fn, Data: m.Data})), true
	}
	return status(s.execNodeSet(d, ge, m)), true
}

// execNodeSet changes the parameters of a node of an executable graph (or of its stage).
func (s *Session) execNodeSet(d *device, ge backend.GraphEdits, m wire.Message) error {
	var exec, node uint64
	switch m := m.(type) {
	case *wire.GraphExecKernelNodeSetParams:
		exec, node = m.Exec, m.Node
	case *wire.GraphExecMemsetNodeSetParams:
		exec, node = m.Exec, m.Node
	case *wire.GraphExecMemcpyNodeSetParams:
		exec, node = m.Exec, m.Node
	}
	x, n, err := s.execNode(d, backend.Handle(exec), backend.Handle(node))
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *wire.GraphExecKernelNodeSetParams:
		return ge.GraphExecKernelNodeSetParams(x, n, backend.LaunchConfig{
			Function: backend.Handle(m.Function), Grid: [3]uint32{m.GridX, m.GridY, m.GridZ},
			Block: [3]uint32{m.BlockX, m.BlockY, m.BlockZ}, SharedMemBytes: m.SharedMem, Params: m.Params})
	case *wire.GraphExecMemsetNodeSetParams:
		return ge.GraphExecMemsetNodeSetParams(x, n, backend.MemsetNode{Dst: m.Dst, Pitch: m.Pitch, Value: m.Value,
			ElemSize: m.ElemSize, Width: m.Width, Height: m.Height})
	case *wire.GraphExecMemcpyNodeSetParams:
		return ge.GraphExecMemcpyNodeSetParams(x, n, deviceCopy(m.SrcKind, m.Src, m.SrcPitch, m.SrcHeight, m.SrcX,
			m.SrcY, m.SrcZ, m.DstKind, m.Dst, m.DstPitch, m.DstHeight, m.DstX, m.DstY, m.DstZ, m.Width, m.Height,
			m.Depth, 0, false))
	}
	return fmt.Errorf("%T: %w", m, backend.ErrNotSupported)
}

// clone clones graph g and lists its nodes with their clones.
func (s *Session) clone(gr backend.Graphs, ge backend.GraphEdits, g backend.Handle) wire.Message {
	ids, _, err := gr.GraphNodes(g)
	if err == nil && len(ids) > maxListed {
		err = fmt.Errorf("clone of a graph of %d nodes, past the %d a reply lists: %w", len(ids), maxListed, backend.ErrNotSupported)
	}
	if err != nil {
		return &wire.GraphCloneReply{Result: int32(backend.ResultOf(err))}
	}
	cl, err := ge.GraphClone(g)
	if err != nil {
		return &wire.GraphCloneReply{Result: int32(backend.ResultOf(err))}
	}
	r := &wire.GraphCloneReply{Graph: uint64(cl), Nodes: make([]byte, 0, 16*len(ids))}
	for _, id := range ids {
		c, err := ge.GraphNodeFindInClone(id, cl)
		if err != nil {
			_ = gr.GraphDestroy(cl)
			return &wire.GraphCloneReply{Result: int32(backend.ResultOf(err))}
		}
		r.Nodes = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(r.Nodes, uint64(id)), uint64(c))
	}
	return r
}

// planReply tells the guest how to launch an executable graph (st nil: whole, no stages).
func planReply(st *stagedExec) wire.Message {
	r := &wire.GraphPlanReply{}
	if st == nil {
		return r
	}
	names := st.nodes
	if st.orig[0] != st.nodes[0] { // updated: the instantiated graph's names too
		names = append(slices.Clone(st.nodes), st.orig...)
	}
	if len(names) > maxListed {
		return &wire.GraphPlanReply{Result: int32(backend.ErrNotSupported)}
	}
	r.Stages = uint32(len(st.stages))
	for _, n := range names {
		cur, _ := st.current(n)
		r.Nodes = binary.LittleEndian.AppendUint64(r.Nodes, uint64(n))
		r.NodeStages = append(r.NodeStages, uint32(st.stageOf[cur]))
	}
	for _, h := range st.hosts {
		for _, v := range []uint64{uint64(h.node), uint64(h.stage), h.fn.Fn, h.fn.Data} {
			r.Hosts = binary.LittleEndian.AppendUint64(r.Hosts, v)
		}
	}
	return r
}

package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// A host node's function lies in the guest process: it cannot run here. So an executable graph
// with host nodes is split into stages. A node's stage is the most host nodes on a path to it
// (a host node counts for the nodes after it, not for itself); the GPU nodes of stage k form one
// graph (a clone of the program's graph with every other node removed), instantiated on its own;
// the guest launches stage k, waits for it, runs the host nodes of stage k, then launches stage
// k+1 (guest/driver/graphstage.c). Every edge of the graph is kept: one between stages by that
// order, one inside a stage by the stage's graph. What is lost is overlap: work after a host node
// starts only when the host node and everything of its stage has ended.

// stagedExec is an executable graph with host nodes.
type stagedExec struct {
	stages  []graphStage
	hosts   []stagedHost
	nodes   []backend.Handle       // the graph's nodes, in a topological order
	stageOf map[backend.Handle]int // node of the graph -> its stage
	// orig is nodes as instantiated: after an update from another graph (whose nodes are nodes,
	// paired by position), the program still names a node by the instantiated graph's.
	orig []backend.Handle
}

// current is the node of the graph last taken that name (a node of it, or of the instantiated
// graph) stands for.
func (st *stagedExec) current(name backend.Handle) (backend.Handle, bool) {
	if _, ok := st.stageOf[name]; ok {
		return name, true
	}
	for i, o := range st.orig {
		if o == name {
			return st.nodes[i], true
		}
	}
	return 0, false
}

// graphStage is one stage: its graph (a clone), instantiated; empty when it has no GPU node.
// cloneOf names the clone's node of each node of the graph it keeps (found when the stage was
// made: the program may destroy its graph, and its nodes, before changing a node's parameters).
type graphStage struct {
	graph, exec backend.Handle
	empty       bool
	cloneOf     map[backend.Handle]backend.Handle
}

type stagedHost struct {
	node  backend.Handle
	stage int
	fn    backend.HostFn
}

// graphPlan is a graph's split into stages (nil stageOf: the graph has no host node).
type graphPlan struct {
	nodes   []backend.Handle
	kinds   map[backend.Handle]uint32
	stageOf map[backend.Handle]int
	stages  int
}

// planGraph splits graph g into stages. Graphs with host nodes and memory, child graph or
// conditional nodes are refused: their stages would be clones, which the driver refuses for
// memory nodes and which would run a body's host nodes nowhere.
func planGraph(gr backend.Graphs, ge backend.GraphEdits, g backend.Handle) (graphPlan, error) {
	ids, kinds, err := gr.GraphNodes(g)
	if err != nil {
		return graphPlan{}, err
	}
	p := graphPlan{kinds: make(map[backend.Handle]uint32, len(ids))}
	hosts := false
	for i, id := range ids {
		p.kinds[id] = kinds[i]
		hosts = hosts || kinds[i] == backend.NodeHost
	}
	if !hosts {
		return p, nil
	}
	for _, k := range kinds {
		switch k {
		case backend.NodeMemAlloc, backend.NodeMemFree, backend.NodeGraph, backend.NodeCond:
			return graphPlan{}, fmt.Errorf("a graph with host nodes and a node of type %d: %w", k, backend.ErrNotSupported)
		}
	}
	from, to, err := ge.GraphEdges(g)
	if err != nil {
		return graphPlan{}, err
	}
	after := map[backend.Handle][]backend.Handle{}
	waiting := make(map[backend.Handle]int, len(ids))
	for i := range from {
		if _, ok := p.kinds[from[i]]; !ok {
			return graphPlan{}, fmt.Errorf("edge from node %d, not of graph %d: %w", from[i], g, backend.ErrInvalidValue)
		}
		after[from[i]] = append(after[from[i]], to[i])
		waiting[to[i]]++
	}
	p.stageOf = make(map[backend.Handle]int, len(ids))
	var ready []backend.Handle
	for _, id := range ids {
		if waiting[id] == 0 {
			ready = append(ready, id)
			p.stageOf[id] = 0
		}
	}
	for len(ready) > 0 { // Kahn's order: a node's stage is final when its last dependency is placed
		n := ready[0]
		ready = ready[1:]
		p.nodes = append(p.nodes, n)
		next := p.stageOf[n]
		if p.kinds[n] == backend.NodeHost {
			next++
		}
		p.stages = max(p.stages, p.stageOf[n]+1)
		for _, m := range after[n] {
			p.stageOf[m] = max(p.stageOf[m], next)
			if waiting[m]--; waiting[m] == 0 {
				ready = append(ready, m)
			}
		}
	}
	if len(p.nodes) != len(ids) {
		return graphPlan{}, fmt.Errorf("graph %d has a cycle: %w", g, backend.ErrInvalidValue)
	}
	return p, nil
}

// stageClone makes the graph of stage k: a clone of g without the nodes of other stages and
// without host nodes.
func stageClone(gr backend.Graphs, ge backend.GraphEdits, g backend.Handle, p graphPlan, k int) (graphStage, error) {
	cl, err := ge.GraphClone(g)
	if err != nil {
		return graphStage{}, err
	}
	sg := graphStage{graph: cl, cloneOf: map[backend.Handle]backend.Handle{}}
	for _, n := range p.nodes {
		c, err := ge.GraphNodeFindInClone(n, cl)
		if err == nil && p.stageOf[n] == k && p.kinds[n] != backend.NodeHost {
			sg.cloneOf[n] = c
			continue
		}
		if err == nil {
			err = ge.GraphDestroyNode(c)
		}
		if err != nil {
			_ = gr.GraphDestroy(cl)
			return graphStage{}, err
		}
	}
	sg.empty = len(sg.cloneOf) == 0
	return sg, nil
}

// instantiateStaged instantiates graph g by stages when it has host nodes (ok false when it has
// none: the caller instantiates it whole). The executable graph's handle is stage 0's.
func (s *Session) instantiateStaged(d *device, gr backend.Graphs, g backend.Handle, flags uint64) (x backend.Handle, ok bool, err error) {
	ge, isEdits := d.ctx.(backend.GraphEdits)
	if !isEdits {
		return 0, false, nil
	}
	p, err := planGraph(gr, ge, g)
	if err != nil {
		return 0, true, err
	}
	if p.stageOf == nil {
		return 0, false, nil
	}
	st := &stagedExec{}
	defer func() {
		if err != nil {
			destroyStages(gr, st.stages)
		}
	}()
	for k := range p.stages {
		sg, err := stageClone(gr, ge, g, p, k)
		if err != nil {
			return 0, true, err
		}
		st.stages = append(st.stages, sg)
		if st.stages[k].exec, err = gr.GraphInstantiate(sg.graph, flags); err != nil {
			return 0, true, err
		}
	}
	if err := st.take(ge, p); err != nil {
		return 0, true, err
	}
	st.orig = p.nodes
	if d.fam.staged == nil {
		d.fam.staged = map[backend.Handle]*stagedExec{}
	}
	d.fam.staged[st.stages[0].exec] = st
	return st.stages[0].exec, true, nil
}

// take records plan p's nodes, stages and host functions.
func (st *stagedExec) take(ge backend.GraphEdits, p graphPlan) error {
	var hosts []stagedHost
	for _, n := range p.nodes {
		if p.kinds[n] != backend.NodeHost {
			continue
		}
		fn, err := ge.GraphHostNode(n)
		if err != nil {
			return err
		}
		hosts = append(hosts, stagedHost{node: n, stage: p.stageOf[n], fn: fn})
	}
	st.hosts, st.nodes, st.stageOf = hosts, p.nodes, p.stageOf
	return nil
}

// destroyStages destroys stages' executable graphs and graphs (what exists of them).
func destroyStages(gr backend.Graphs, stages []graphStage) {
	for _, sg := range stages {
		if sg.exec != 0 {
			_ = gr.GraphExecDestroy(sg.exec)
		}
		if sg.graph != 0 {
			_ = gr.GraphDestroy(sg.graph)
		}
	}
}

// launchStage launches stage k of a staged executable graph on stream.
func (s *Session) launchStage(d *device, gr backend.Graphs, x, stream backend.Handle, k uint32) error {
	st := d.fam.staged[x]
	if st == nil {
		return fmt.Errorf("launch of a stage of executable graph %d, which has no host node: %w", x, backend.ErrInvalidValue)
	}
	if uint64(k) >= uint64(len(st.stages)) {
		return fmt.Errorf("launch of stage %d of executable graph %d, which has %d: %w", k, x, len(st.stages), backend.ErrInvalidValue)
	}
	if st.stages[k].empty {
		return nil
	}
	return gr.GraphLaunch(st.stages[k].exec, stream)
}

// destroyStaged destroys a staged executable graph; ok is false when x is not one.
func (s *Session) destroyStaged(d *device, gr backend.Graphs, x backend.Handle) bool {
	st := d.fam.staged[x]
	if st == nil {
		return false
	}
	destroyStages(gr, st.stages)
	delete(d.fam.staged, x)
	return true
}

// CUgraphExecUpdateResult numbers.
const (
	updateTopologyChanged = 2
	updateNotSupported    = 7
)

// updateStaged updates executable graph x from graph g when either has host nodes (ok false when
// neither has: the caller updates it whole). Each stage is updated from g's clone of the stage,
// so g must split into as many stages, each of the same shape as before. A failure past the first
// stage leaves the earlier ones updated (NVIDIA's leaves the executable graph as it was).
func (s *Session) updateStaged(d *device, gr backend.Graphs, x, g backend.Handle) (result uint32, ok bool, err error) {
	ge, isEdits := d.ctx.(backend.GraphEdits)
	if !isEdits {
		return 0, false, nil
	}
	st := d.fam.staged[x]
	p, err := planGraph(gr, ge, g)
	switch {
	case err != nil:
		return updateNotSupported, true, err
	case st == nil && p.stageOf == nil:
		return 0, false, nil
	case st == nil || p.stageOf == nil || p.stages != len(st.stages) || len(p.nodes) != len(st.orig):
		return updateTopologyChanged, true, fmt.Errorf("update: host nodes or their stages differ: %w", backend.ErrGraphExecUpdateFailure)
	}
	clones := make([]graphStage, 0, p.stages)
	for k := range p.stages {
		sg, err := stageClone(gr, ge, g, p, k)
		if err == nil {
			clones = append(clones, sg)
			if r, uerr := gr.GraphExecUpdate(st.stages[k].exec, sg.graph); uerr != nil {
				result, err = r, uerr
			}
		}
		if err != nil {
			destroyStages(gr, clones)
			return max(result, updateTopologyChanged), true, err
		}
	}
	if err := st.take(ge, p); err != nil {
		destroyStages(gr, clones)
		return updateNotSupported, true, err
	}
	for k := range st.stages {
		_ = gr.GraphDestroy(st.stages[k].graph)
		clones[k].exec = st.stages[k].exec
		st.stages[k] = clones[k]
	}
	return 0, true, nil
}

// execNode is where a node of executable graph x's graph lives: in x itself, or in the stage
// that holds it (its clone there).
func (s *Session) execNode(d *device, x, node backend.Handle) (backend.Handle, backend.Handle, error) {
	st := d.fam.staged[x]
	if st == nil {
		return x, node, nil
	}
	cur, ok := st.current(node)
	if !ok {
		return 0, 0, fmt.Errorf("node %d is not of executable graph %d: %w", node, x, backend.ErrInvalidValue)
	}
	sg := st.stages[st.stageOf[cur]]
	c, ok := sg.cloneOf[cur]
	if !ok {
		return 0, 0, fmt.Errorf("node %d of executable graph %d is a host node: %w", node, x, backend.ErrInvalidValue)
	}
	return sg.exec, c, nil
}

// setExecHost changes a host node of a staged executable graph.
func (s *Session) setExecHost(d *device, x, node backend.Handle, fn backend.HostFn) error {
	st := d.fam.staged[x]
	if fn.Fn == 0 {
		return fmt.Errorf("host node without a function: %w", backend.ErrInvalidValue)
	}
	if cur, ok := st.current(node); st != nil && ok {
		for i := range st.hosts {
			if st.hosts[i].node == cur {
				st.hosts[i].fn = fn
				return nil
			}
		}
	}
	return fmt.Errorf("node %d is no host node of executable graph %d: %w", node, x, backend.ErrInvalidValue)
}

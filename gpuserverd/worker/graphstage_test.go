package worker

import (
	"encoding/binary"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A graph with host nodes is instantiated by stages: A -> H1 -> B -> H2 -> D, C alone. A, H1 and
// C run in stage 0, B and H2 in stage 1, D in stage 2; the plan names each node's stage and each
// host node's function; the executable graph launches only by stages.
func TestGraphStagesPlan(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 1 << 20, Devices: []int{0}})
	var h wire.HandleReply
	var st wire.Status
	node := func(m wire.Message) uint64 {
		t.Helper()
		c.call(m, &h)
		if h.Result != 0 {
			t.Fatalf("%T: %d", m, h.Result)
		}
		return h.Handle
	}
	g := node(&wire.GraphCreate{})
	a := node(&wire.GraphAddEmptyNode{Graph: g})
	h1 := node(&wire.GraphAddHostNode{Graph: g, Deps: u64s(a), Fn: 0x1000, Data: 1})
	b := node(&wire.GraphAddEmptyNode{Graph: g, Deps: u64s(h1)})
	cc := node(&wire.GraphAddEmptyNode{Graph: g})
	h2 := node(&wire.GraphAddHostNode{Graph: g, Deps: u64s(b, cc), Fn: 0x2000, Data: 2})
	d := node(&wire.GraphAddEmptyNode{Graph: g, Deps: u64s(h2)})

	c.call(&wire.GraphAddHostNode{Graph: g, Fn: 0}, &h)
	if backend.Result(h.Result) != backend.ErrInvalidValue {
		t.Fatalf("host node without a function: %d", h.Result)
	}
	c.call(&wire.GraphAddHostNode{Graph: g, Deps: []byte{1, 2, 3}, Fn: 1}, &h)
	if backend.Result(h.Result) != backend.ErrInvalidValue {
		t.Fatalf("dependencies of 3 bytes: %d", h.Result)
	}

	x := node(&wire.GraphInstantiate{Graph: g})
	var p wire.GraphPlanReply
	c.call(&wire.GraphExecPlan{Exec: x}, &p)
	if p.Result != 0 || p.Stages != 3 {
		t.Fatalf("plan: result %d, %d stages", p.Result, p.Stages)
	}
	want := map[uint64]uint32{a: 0, h1: 0, cc: 0, b: 1, h2: 1, d: 2}
	for i, s := range p.NodeStages {
		n := binary.LittleEndian.Uint64(p.Nodes[8*i:])
		if want[n] != s {
			t.Errorf("node %d in stage %d, want %d", n, s, want[n])
		}
		delete(want, n)
	}
	if len(want) != 0 || len(p.Hosts) != 64 {
		t.Fatalf("nodes missing from the plan: %v; %d bytes of host nodes", want, len(p.Hosts))
	}
	for i, w := range [][4]uint64{{h1, 0, 0x1000, 1}, {h2, 1, 0x2000, 2}} {
		for j := range w {
			if v := binary.LittleEndian.Uint64(p.Hosts[32*i+8*j:]); v != w[j] {
				t.Errorf("host entry %d field %d: %d, want %d", i, j, v, w[j])
			}
		}
	}

	c.call(&wire.GraphLaunch{Exec: x}, &st)
	if backend.Result(st.Result) != backend.ErrNotSupported {
		t.Fatalf("whole launch of a graph with host nodes: %d", st.Result)
	}
	for k := uint32(0); k < 3; k++ {
		c.call(&wire.GraphLaunchStage{Exec: x, Stage: k}, &st)
		if st.Result != 0 {
			t.Fatalf("stage %d: %d %s", k, st.Result, st.Message)
		}
	}
	c.call(&wire.GraphLaunchStage{Exec: x, Stage: 3}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("stage 3 of 3: %d", st.Result)
	}
	c.call(&wire.GraphExecHostNodeSetParams{Exec: x, Node: h2, Fn: 0x3000, Data: 3}, &st)
	c.call(&wire.GraphExecPlan{Exec: x}, &p)
	if st.Result != 0 || binary.LittleEndian.Uint64(p.Hosts[32+16:]) != 0x3000 {
		t.Fatalf("host node's new function: %d, plan %x", st.Result, p.Hosts)
	}
	c.call(&wire.GraphExecHostNodeSetParams{Exec: x, Node: b, Fn: 0x3000}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("host parameters for an empty node: %d", st.Result)
	}

	var cl wire.GraphCloneReply
	c.call(&wire.GraphClone{Graph: g}, &cl)
	if cl.Result != 0 || len(cl.Nodes) != 6*16 {
		t.Fatalf("clone: %d, %d bytes of pairs", cl.Result, len(cl.Nodes))
	}
	var hn wire.GraphHostNodeReply
	c.call(&wire.GraphHostNodeGetParams{Node: binary.LittleEndian.Uint64(cl.Nodes[16+8:])}, &hn)
	if hn.Result != 0 || hn.Fn != 0x1000 || hn.Data != 1 {
		t.Fatalf("the clone's host node: %+v", hn)
	}

	c.call(&wire.GraphExecDestroy{Exec: x}, &st)
	c.call(&wire.GraphExecPlan{Exec: x}, &p)
	if st.Result != 0 || p.Stages != 0 {
		t.Fatalf("destroy: %d; plan after it: %d stages", st.Result, p.Stages)
	}
	c.call(&wire.GraphLaunchStage{Exec: x}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("a stage of a destroyed executable graph: %d", st.Result)
	}
}

// A graph with host nodes and an allocation node is refused (its stages would be clones, which
// the driver refuses for memory nodes).
func TestGraphStagesRefuseMemoryNodes(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 1 << 20, Devices: []int{0}})
	var h wire.HandleReply
	c.call(&wire.GraphCreate{}, &h)
	g := h.Handle
	c.call(&wire.GraphAddHostNode{Graph: g, Fn: 0x1000}, &h)
	c.call(&wire.GraphAddMemAllocNode{Graph: g, Bytes: 4096, AllocType: 1, LocationType: 1}, &wire.GraphMemAllocNodeReply{})
	c.call(&wire.GraphInstantiate{Graph: g}, &h)
	if backend.Result(h.Result) != backend.ErrNotSupported {
		t.Fatalf("instantiate: %d", h.Result)
	}
}

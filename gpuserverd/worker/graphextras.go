package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// graphMemCharge is the device memory graphs may hold, charged to the session's quota. The driver
// gives an allocation node's memory at a launch, from a pool of the device that keeps it (freed
// or not) until cuDeviceGraphMemTrim; so the worker charges at instantiation the most one launch
// can hold (the graph's allocation nodes' sizes, bodies included) and keeps charging a destroyed
// executable graph's share, which its unfreed allocations and the pool may still hold, until a
// trim shows what remains.
type graphMemCharge struct {
	execs   map[backend.Handle]uint64 // executable graph -> bytes charged
	retired uint64                    // charged for destroyed executable graphs
}

// asyncCharges are the stream-ordered allocations the worker charged (a captured one becomes an
// allocation node, charged with its graph instead), so a free gives back only what was charged.
type asyncCharges map[uint64]uint64

// extrasReply is the reply a GraphExtras message gets when it fails with err (nil for others).
func extrasReply(m wire.Message, err error) wire.Message {
	r := int32(backend.ResultOf(err))
	switch m.(type) {
	case *wire.GraphConditionalHandleCreate, *wire.GraphAddMemFreeNode:
		return &wire.HandleReply{Result: r}
	case *wire.GraphAddConditionalNode:
		return &wire.GraphConditionalNodeReply{Result: r}
	case *wire.GraphAddMemAllocNode:
		return &wire.GraphMemAllocNodeReply{Result: r}
	case *wire.DeviceGraphMemAttribute:
		return &wire.SizeReply{Result: r}
	case *wire.StreamCaptureGraph:
		return &wire.CaptureGraphReply{Result: r}
	case *wire.DeviceGraphMemTrim, *wire.DeviceSetGraphMemAttribute, *wire.StreamBeginCaptureToGraph,
		*wire.StreamUpdateCaptureDependencies:
		return status(err)
	}
	return nil
}

func nodeBytes(ids []backend.Handle) []byte {
	b := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, uint64(id))
	}
	return b
}

// graphExtras answers the GraphExtras messages; ok is false for others.
func (s *Session) graphExtras(d *device, m wire.Message) (wire.Message, bool) {
	if extrasReply(m, nil) == nil {
		return nil, false
	}
	ge, ok := d.ctx.(backend.GraphExtras)
	if !ok {
		return extrasReply(m, errNoFamily), true
	}
	var raw []byte
	switch m := m.(type) {
	case *wire.GraphAddConditionalNode:
		raw = m.Deps
	case *wire.GraphAddMemAllocNode:
		raw = m.Deps
	case *wire.GraphAddMemFreeNode:
		raw = m.Deps
	case *wire.StreamBeginCaptureToGraph:
		raw = m.Deps
	case *wire.StreamUpdateCaptureDependencies:
		raw = m.Deps
	}
	deps, err := nodeIDs(raw)
	if err != nil {
		return extrasReply(m, err), true
	}
	switch m := m.(type) {
	case *wire.GraphConditionalHandleCreate:
		return handleReply(ge.GraphConditionalHandleCreate(backend.Handle(m.Graph), m.DefaultValue, m.Flags)), true
	case *wire.GraphAddConditionalNode:
		p := backend.ConditionalNode{Handle: m.Handle, Type: m.CondType, Size: m.Size}
		if !p.Valid() {
			return extrasReply(m, fmt.Errorf("conditional node of type %d with %d bodies: %w", m.CondType, m.Size, backend.ErrInvalidValue)), true
		}
		node, bodies, err := ge.GraphAddConditionalNode(backend.Handle(m.Graph), deps, p)
		if err != nil {
			return extrasReply(m, err), true
		}
		return &wire.GraphConditionalNodeReply{Node: uint64(node), Bodies: nodeBytes(bodies)}, true
	case *wire.GraphAddMemAllocNode:
		node, ptr, err := ge.GraphAddMemAllocNode(backend.Handle(m.Graph), deps, backend.AllocProps{Type: m.AllocType,
			LocationType: m.LocationType, LocationID: m.LocationID, HandleTypes: m.HandleTypes, Size: m.Bytes})
		if err != nil {
			return extrasReply(m, err), true
		}
		return &wire.GraphMemAllocNodeReply{Node: uint64(node), Ptr: ptr}, true
	case *wire.GraphAddMemFreeNode:
		return handleReply(ge.GraphAddMemFreeNode(backend.Handle(m.Graph), deps, m.Ptr)), true
	case *wire.DeviceGraphMemTrim:
		if err := s.sameDevice(m.Ordinal); err != nil {
			return status(err), true
		}
		return status(s.graphMemTrim(d, ge)), true
	case *wire.DeviceGraphMemAttribute:
		if err := s.sameDevice(m.Ordinal); err != nil {
			return extrasReply(m, err), true
		}
		v, err := ge.DeviceGraphMemAttribute(m.Attribute)
		return &wire.SizeReply{Result: int32(backend.ResultOf(err)), Value: v}, true
	case *wire.DeviceSetGraphMemAttribute:
		if err := s.sameDevice(m.Ordinal); err != nil {
			return status(err), true
		}
		return status(ge.DeviceSetGraphMemAttribute(m.Attribute, m.Value)), true
	case *wire.StreamBeginCaptureToGraph:
		err := ge.StreamBeginCaptureToGraph(backend.Handle(m.Stream), backend.Handle(m.Graph), deps, m.Mode)
		if err == nil {
			if d.fam.capturing == nil {
				d.fam.capturing = map[backend.Handle]bool{}
			}
			d.fam.capturing[backend.Handle(m.Stream)] = false
			if d.fam.into == nil {
				d.fam.into = map[backend.Handle]bool{}
			}
			d.fam.into[backend.Handle(m.Stream)] = true
		}
		return status(err), true
	case *wire.StreamCaptureGraph:
		cg, err := ge.StreamCaptureGraph(backend.Handle(m.Stream))
		if err == nil && len(cg.Deps) > 8192 {
			err = fmt.Errorf("a capture depending on %d nodes, past the 8192 a reply lists: %w", len(cg.Deps), backend.ErrNotSupported)
		}
		if err != nil {
			return extrasReply(m, err), true
		}
		return &wire.CaptureGraphReply{Status: cg.Status, ID: cg.ID, Graph: uint64(cg.Graph), Deps: nodeBytes(cg.Deps)}, true
	case *wire.StreamUpdateCaptureDependencies:
		return status(ge.StreamUpdateCaptureDependencies(backend.Handle(m.Stream), deps, m.Flags)), true
	}
	return nil, false
}

// graphMemTrim trims the device's graph memory once its work is done, then gives back what
// destroyed executable graphs were charged past what the pool still holds.
func (s *Session) graphMemTrim(d *device, ge backend.GraphExtras) error {
	if err := d.ctx.Synchronize(); err != nil {
		return err
	}
	if err := ge.DeviceGraphMemTrim(); err != nil {
		return err
	}
	held, err := ge.DeviceGraphMemAttribute(backend.GraphMemReserved)
	if err != nil {
		return err
	}
	c := &d.fam.graphMem
	if held < c.retired {
		s.uncharge(d, c.retired-held)
		c.retired = held
	}
	return nil
}

// instantiate charges what the graph's allocation nodes may hold, then instantiates it.
func (s *Session) instantiate(d *device, g backend.Graphs, m *wire.GraphInstantiate) wire.Message {
	if x, ok, err := s.instantiateStaged(d, g, backend.Handle(m.Graph), m.Flags); ok {
		return handleReply(x, err)
	}
	var n uint64
	if ge, ok := d.ctx.(backend.GraphExtras); ok {
		var err error
		if n, err = ge.GraphAllocBytes(backend.Handle(m.Graph)); err != nil {
			return famReply(m, err)
		}
	}
	if err := s.charge(d, n); err != nil {
		return famReply(m, fmt.Errorf("instantiate: the graph allocates %d bytes: %w", n, err))
	}
	x, err := g.GraphInstantiate(backend.Handle(m.Graph), m.Flags)
	if err != nil {
		s.uncharge(d, n)
		return famReply(m, err)
	}
	if n > 0 {
		if d.fam.graphMem.execs == nil {
			d.fam.graphMem.execs = map[backend.Handle]uint64{}
		}
		d.fam.graphMem.execs[x] = n
	}
	return handleReply(x, nil)
}

// execUpdate takes a graph's parameters into an executable graph, charging first what the
// graph's allocation nodes may hold past what the executable graph was charged.
func (s *Session) execUpdate(d *device, g backend.Graphs, m *wire.GraphExecUpdate) wire.Message {
	x, c := backend.Handle(m.Exec), &d.fam.graphMem
	if v, ok, err := s.updateStaged(d, g, x, backend.Handle(m.Graph)); ok {
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: int32(v)}
	}
	var more uint64
	if ge, ok := d.ctx.(backend.GraphExtras); ok {
		n, err := ge.GraphAllocBytes(backend.Handle(m.Graph))
		if err != nil {
			return famReply(m, err)
		}
		more = n - min(n, c.execs[x])
	}
	if err := s.charge(d, more); err != nil {
		return famReply(m, fmt.Errorf("update: the graph allocates %d bytes more: %w", more, err))
	}
	v, err := g.GraphExecUpdate(x, backend.Handle(m.Graph))
	if err != nil {
		s.uncharge(d, more)
	} else if more > 0 {
		if c.execs == nil {
			c.execs = map[backend.Handle]uint64{}
		}
		c.execs[x] += more
	}
	return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: int32(v)}
}

// execDestroyed keeps a destroyed executable graph's charge until a trim.
func (s *Session) execDestroyed(d *device, x backend.Handle) {
	c := &d.fam.graphMem
	if n, ok := c.execs[x]; ok {
		delete(c.execs, x)
		c.retired += n
	}
}

// capturing says whether the stream is capturing (its stream-ordered allocations become nodes).
func capturing(d *device, stream uint64) bool {
	g, ok := d.ctx.(backend.Graphs)
	if !ok {
		return false
	}
	ci, err := g.StreamCaptureInfo(backend.Handle(stream))
	return err == nil && ci.Status != 0
}

package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// famState is what the worker keeps of the hand-written driver-API families (issue 14) to charge
// device memory to the session's quota and to refuse what a capture cannot hold.
type famState struct {
	physical  map[backend.Handle]*vmAlloc    // cuMemCreate allocations
	mappings  map[uint64]vmMapping           // mapped address -> what is mapped there
	arrays    map[backend.Handle]uint64      // array -> bytes charged
	capturing map[backend.Handle]bool        // streams in capture -> whether a call refused invalidated it
	into      map[backend.Handle]bool        // streams capturing into an existing graph (theirs to keep)
	graphMem  graphMemCharge                 // graphs' allocation nodes (graphextras.go)
	staged    map[backend.Handle]*stagedExec // executable graphs with host nodes (graphstage.go)
	async     asyncCharges                   // stream-ordered allocations charged
}

// mappedThrough returns the end of the mapping that holds address a, if one does.
func (f *famState) mappedThrough(a uint64) (end uint64, ok bool) {
	for base, m := range f.mappings {
		if a >= base && a-base < m.size {
			return base + m.size, true
		}
	}
	return 0, false
}

// vmAlloc is a physical allocation: charged until its handle, its retains and its mappings are
// all gone, as the driver frees it.
type vmAlloc struct {
	bytes uint64
	refs  int
}

type vmMapping struct {
	handle backend.Handle
	size   uint64
}

var errNoFamily = fmt.Errorf("this backend does not offer the call: %w", backend.ErrNotSupported)

// family answers the families' messages, and refuses copies with the guest's memory on a
// capturing stream (a graph would replay them from a worker's staging buffer). ok is false for
// any other message.
func (s *Session) family(m wire.Message) (answer wire.Message, ok bool) {
	if a := s.captureGuard(m); a != nil {
		return a, true
	}
	if famReply(m, nil) == nil {
		return nil, false
	}
	d, err := s.dev()
	if err != nil {
		return famReply(m, err), true
	}
	return s.familyOn(d, m), true
}

// captureGuard returns a refusal for a host copy on a capturing stream, else nil.
func (s *Session) captureGuard(m wire.Message) wire.Message {
	if s.current >= len(s.devs) || s.devs[s.current] == nil {
		return nil
	}
	capturing := s.devs[s.current].fam.capturing
	if len(capturing) == 0 {
		return nil
	}
	var stream uint64
	var dataReply wire.Message
	switch m := m.(type) {
	case *wire.MemcpyHtoD:
		stream = m.Stream
	case *wire.MemcpyHtoDShm:
		stream = m.Stream
	case *wire.MemcpyDtoHShm:
		stream = m.Stream
	case *wire.Memcpy3DHtoX:
		stream = m.Stream
	case *wire.MemcpyDtoH:
		stream, dataReply = m.Stream, &wire.MemcpyDtoHData{Result: int32(backend.ErrStreamCaptureUnsupported)}
	case *wire.Memcpy3DXtoH:
		stream, dataReply = m.Stream, &wire.Memcpy3DData{Result: int32(backend.ErrStreamCaptureUnsupported)}
	default:
		return nil
	}
	if _, ok := capturing[backend.Handle(stream)]; !ok {
		return nil
	}
	capturing[backend.Handle(stream)] = true // the capture is void, as the driver voids it
	if dataReply != nil {
		return dataReply
	}
	return status(fmt.Errorf("a copy with host memory on a capturing stream: %w", backend.ErrStreamCaptureUnsupported))
}

// famReply is the reply a family message gets when it fails with err (nil for other messages).
func famReply(m wire.Message, err error) wire.Message {
	r := int32(backend.ResultOf(err))
	switch m.(type) {
	case *wire.MemAddressReserve, *wire.MemCreate, *wire.MemRetainAllocationHandle, *wire.MemAllocAsync,
		*wire.MemPoolCreate, *wire.DeviceGetMemPool, *wire.ArrayCreate, *wire.TexObjectCreate,
		*wire.SurfObjectCreate, *wire.StreamEndCapture, *wire.GraphCreate, *wire.GraphAddKernelNode,
		*wire.GraphAddMemsetNode, *wire.GraphAddMemcpyNode, *wire.GraphAddEmptyNode, *wire.GraphInstantiate,
		*wire.LinkCreate:
		return &wire.HandleReply{Result: r}
	case *wire.LinkComplete:
		return &wire.LinkCompleteReply{Result: r}
	case *wire.MemGetAllocationGranularity, *wire.MemPoolGetAttribute:
		return &wire.SizeReply{Result: r}
	case *wire.MemGetAllocationProperties:
		return &wire.MemAllocationPropertiesReply{Result: r}
	case *wire.ArrayGetDescriptor:
		return &wire.ArrayDescriptorReply{Result: r}
	case *wire.Memcpy3DXtoH:
		return &wire.Memcpy3DData{Result: r}
	case *wire.TexObjectGetResourceDesc:
		return &wire.ResourceDescReply{Result: r}
	case *wire.StreamGetCaptureInfo:
		return &wire.CaptureInfoReply{Result: r}
	case *wire.GraphGetNodes:
		return &wire.GraphNodesReply{Result: r}
	case *wire.GraphExecUpdate:
		return &wire.ValueReply{Result: r}
	case *wire.TensorMapEncode:
		return &wire.TensorMapReply{Result: r}
	case *wire.MemAddressFree, *wire.MemRelease, *wire.MemMap, *wire.MemUnmap, *wire.MemSetAccess,
		*wire.MemFreeAsync, *wire.MemPoolDestroy, *wire.MemPoolSetAttribute, *wire.MemPoolTrimTo,
		*wire.DeviceSetMemPool, *wire.ArrayDestroy, *wire.Memcpy3DHtoX, *wire.Memcpy3DXtoX,
		*wire.TexObjectDestroy, *wire.SurfObjectDestroy, *wire.StreamBeginCapture, *wire.GraphDestroy,
		*wire.GraphLaunch, *wire.GraphExecDestroy, *wire.LaunchKernelEx, *wire.StreamMemOp, *wire.LinkAddData,
		*wire.LinkDestroy:
		return status(err)
	}
	if r := extrasReply(m, err); r != nil {
		return r
	}
	return editsReply(m, err)
}

func handleReply[H ~uint64](h H, err error) wire.Message {
	return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: uint64(h)}
}

func (s *Session) familyOn(d *device, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.MemAddressReserve, *wire.MemAddressFree, *wire.MemCreate, *wire.MemRelease, *wire.MemMap,
		*wire.MemUnmap, *wire.MemSetAccess, *wire.MemGetAllocationGranularity, *wire.MemGetAllocationProperties,
		*wire.MemRetainAllocationHandle:
		vm, ok := d.ctx.(backend.VirtualMemory)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return s.virtualMemory(d, vm, m)
	case *wire.MemAllocAsync, *wire.MemFreeAsync, *wire.MemPoolCreate, *wire.MemPoolDestroy,
		*wire.MemPoolSetAttribute, *wire.MemPoolGetAttribute, *wire.MemPoolTrimTo, *wire.DeviceGetMemPool,
		*wire.DeviceSetMemPool:
		mp, ok := d.ctx.(backend.MemPools)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return s.memPools(d, mp, m)
	case *wire.ArrayCreate, *wire.ArrayDestroy, *wire.ArrayGetDescriptor, *wire.Memcpy3DHtoX,
		*wire.Memcpy3DXtoH, *wire.Memcpy3DXtoX:
		ar, ok := d.ctx.(backend.Arrays)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return s.arrays(d, ar, m)
	case *wire.TexObjectCreate, *wire.TexObjectDestroy, *wire.TexObjectGetResourceDesc,
		*wire.SurfObjectCreate, *wire.SurfObjectDestroy:
		tx, ok := d.ctx.(backend.Textures)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return textures(tx, m)
	case *wire.LinkCreate, *wire.LinkAddData, *wire.LinkComplete, *wire.LinkDestroy:
		l, ok := d.ctx.(backend.Linker)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return linker(l, m)
	case *wire.TensorMapEncode:
		tm, ok := d.ctx.(backend.TensorMaps)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return tensorMap(tm, m)
	case *wire.StreamMemOp:
		mo, ok := d.ctx.(backend.StreamMemOps)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return status(mo.StreamMemOp(backend.Handle(m.Stream), m.Op, m.Addr, m.Value, m.Flags))
	case *wire.LaunchKernelEx:
		l, ok := d.ctx.(backend.Launches)
		if !ok {
			return famReply(m, errNoFamily)
		}
		return status(l.LaunchKernelEx(backend.LaunchConfig{
			Function: backend.Handle(m.Function), Grid: [3]uint32{m.GridX, m.GridY, m.GridZ},
			Block: [3]uint32{m.BlockX, m.BlockY, m.BlockZ}, SharedMemBytes: m.SharedMem,
			Stream: backend.Handle(m.Stream), Params: m.Params,
		}, backend.LaunchEx{Cooperative: m.Cooperative != 0, Cluster: [3]uint32{m.ClusterX, m.ClusterY, m.ClusterZ},
			Priority: m.Priority}))
	}
	if a, ok := s.graphExtras(d, m); ok {
		return a
	}
	if a, ok := s.graphEdits(d, m); ok {
		return a
	}
	g, ok := d.ctx.(backend.Graphs)
	if !ok {
		return famReply(m, errNoFamily)
	}
	return s.graphs(d, g, m)
}

func (s *Session) virtualMemory(d *device, vm backend.VirtualMemory, m wire.Message) wire.Message {
	f := &d.fam
	switch m := m.(type) {
	case *wire.MemAddressReserve:
		p, err := vm.MemAddressReserve(m.Size, m.Alignment, m.Addr, m.Flags)
		return handleReply(p, err)
	case *wire.MemAddressFree:
		return status(vm.MemAddressFree(m.Ptr, m.Size))
	case *wire.MemCreate:
		if err := s.charge(d, m.Size); err != nil {
			return famReply(m, err)
		}
		h, err := vm.MemCreate(backend.AllocProps{Type: m.AllocType, LocationType: m.LocationType,
			LocationID: m.LocationID, HandleTypes: m.HandleTypes, Size: m.Size, Compression: m.Compression}, m.Flags)
		if err != nil {
			s.uncharge(d, m.Size)
			return famReply(m, err)
		}
		if f.physical == nil {
			f.physical = map[backend.Handle]*vmAlloc{}
		}
		f.physical[h] = &vmAlloc{bytes: m.Size, refs: 1}
		return handleReply(h, nil)
	case *wire.MemRelease:
		err := vm.MemRelease(backend.Handle(m.Handle))
		if err == nil {
			s.vmUnref(d, backend.Handle(m.Handle))
		}
		return status(err)
	case *wire.MemMap:
		err := vm.MemMap(m.Ptr, m.Size, m.Offset, backend.Handle(m.Handle), m.Flags)
		if a := f.physical[backend.Handle(m.Handle)]; err == nil && a != nil {
			if f.mappings == nil {
				f.mappings = map[uint64]vmMapping{}
			}
			f.mappings[m.Ptr] = vmMapping{handle: backend.Handle(m.Handle), size: m.Size}
			a.refs++
		}
		return status(err)
	case *wire.MemUnmap:
		err := vm.MemUnmap(m.Ptr, m.Size)
		if err == nil {
			for p, mp := range f.mappings {
				if p >= m.Ptr && p-m.Ptr < m.Size {
					delete(f.mappings, p)
					s.vmUnref(d, mp.handle)
				}
			}
		}
		return status(err)
	case *wire.MemSetAccess:
		return status(vm.MemSetAccess(m.Ptr, m.Size, m.LocationType, m.LocationID, m.Flags))
	case *wire.MemGetAllocationGranularity:
		v, err := vm.MemGetAllocationGranularity(backend.AllocProps{Type: m.AllocType, LocationType: m.LocationType,
			LocationID: m.LocationID}, m.Option)
		return &wire.SizeReply{Result: int32(backend.ResultOf(err)), Value: v}
	case *wire.MemGetAllocationProperties:
		p, err := vm.MemGetAllocationProperties(backend.Handle(m.Handle))
		return &wire.MemAllocationPropertiesReply{Result: int32(backend.ResultOf(err)), AllocType: p.Type,
			LocationType: p.LocationType, LocationID: p.LocationID, HandleTypes: p.HandleTypes, Size: p.Size,
			Compression: p.Compression}
	case *wire.MemRetainAllocationHandle:
		h, err := vm.MemRetainAllocationHandle(m.Ptr)
		if a := f.physical[h]; err == nil && a != nil {
			a.refs++
		}
		return handleReply(h, err)
	}
	return nil
}

// vmUnref drops a reference to a physical allocation, uncharging it with the last.
func (s *Session) vmUnref(d *device, h backend.Handle) {
	a := d.fam.physical[h]
	if a == nil {
		return
	}
	if a.refs--; a.refs == 0 {
		delete(d.fam.physical, h)
		s.uncharge(d, a.bytes)
	}
}

func (s *Session) memPools(d *device, mp backend.MemPools, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.MemAllocAsync:
		var n uint64 // captured: an allocation node, charged with its graph
		if !capturing(d, m.Stream) {
			n = m.Bytes
		}
		if err := s.charge(d, n); err != nil {
			return famReply(m, err)
		}
		p, err := mp.MemAllocAsync(m.Bytes, backend.Handle(m.Stream), backend.Handle(m.Pool))
		if err != nil {
			s.uncharge(d, n)
		} else if n > 0 {
			if d.fam.async == nil {
				d.fam.async = asyncCharges{}
			}
			d.fam.async[p] = n
		}
		return handleReply(p, err)
	case *wire.MemFreeAsync:
		_, err := mp.MemFreeAsync(m.Ptr, backend.Handle(m.Stream))
		if n, ok := d.fam.async[m.Ptr]; err == nil && ok && !capturing(d, m.Stream) {
			delete(d.fam.async, m.Ptr)
			s.uncharge(d, n)
		}
		return status(err)
	case *wire.MemPoolCreate:
		h, err := mp.MemPoolCreate(backend.PoolProps{AllocType: m.AllocType, HandleTypes: m.HandleTypes,
			LocationType: m.LocationType, LocationID: m.LocationID, MaxSize: m.MaxSize})
		return handleReply(h, err)
	case *wire.MemPoolDestroy:
		return status(mp.MemPoolDestroy(backend.Handle(m.Pool)))
	case *wire.MemPoolSetAttribute:
		return status(mp.MemPoolSetAttribute(backend.Handle(m.Pool), m.Attribute, m.Value))
	case *wire.MemPoolGetAttribute:
		v, err := mp.MemPoolGetAttribute(backend.Handle(m.Pool), m.Attribute)
		return &wire.SizeReply{Result: int32(backend.ResultOf(err)), Value: v}
	case *wire.MemPoolTrimTo:
		return status(mp.MemPoolTrimTo(backend.Handle(m.Pool), m.MinBytes))
	case *wire.DeviceGetMemPool:
		if err := s.sameDevice(m.Ordinal); err != nil {
			return famReply(m, err)
		}
		if m.Which == 1 {
			return handleReply(mp.DefaultMemPool())
		}
		return handleReply(mp.CurrentMemPool())
	case *wire.DeviceSetMemPool:
		if err := s.sameDevice(m.Ordinal); err != nil {
			return famReply(m, err)
		}
		return status(mp.SetMemPool(backend.Handle(m.Pool)))
	}
	return nil
}

// sameDevice checks that a call naming a device names the current one (the guest selects it).
func (s *Session) sameDevice(ordinal uint32) error {
	if int(ordinal) != s.current {
		return fmt.Errorf("device %d is not the current device %d: %w", ordinal, s.current, backend.ErrInvalidDevice)
	}
	return nil
}

func side(kind uint32, ptr, pitch, height, x, y, z uint64) backend.CopySide {
	return backend.CopySide{Kind: kind, Ptr: ptr, Pitch: pitch, Height: height, X: x, Y: y, Z: z}
}

// hostBox is the size of a packed host box, or an error past what one frame may carry.
func hostBox(w, h, dp uint64) (uint64, error) {
	if h != 0 && dp != 0 && (w > wire.MaxChunk || h > wire.MaxChunk || dp > wire.MaxChunk || w*h*dp > wire.MaxChunk) {
		return 0, fmt.Errorf("host box %dx%dx%d past %d bytes a frame: %w", w, h, dp, wire.MaxChunk, backend.ErrInvalidValue)
	}
	return w * h * dp, nil
}

func (s *Session) arrays(d *device, ar backend.Arrays, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.ArrayCreate:
		desc := backend.ArrayDesc{Width: m.Width, Height: m.Height, Depth: m.Depth, Format: m.Format,
			Channels: m.Channels, Flags: m.Flags}
		n := desc.Bytes()
		if n == 0 {
			return famReply(m, fmt.Errorf("array %dx%dx%d, format %#x, %d channels: %w", m.Width, m.Height, m.Depth,
				m.Format, m.Channels, backend.ErrInvalidValue))
		}
		if err := s.charge(d, n); err != nil {
			return famReply(m, err)
		}
		h, err := ar.ArrayCreate(desc)
		if err != nil {
			s.uncharge(d, n)
			return famReply(m, err)
		}
		if d.fam.arrays == nil {
			d.fam.arrays = map[backend.Handle]uint64{}
		}
		d.fam.arrays[h] = n
		return handleReply(h, nil)
	case *wire.ArrayDestroy:
		err := ar.ArrayDestroy(backend.Handle(m.Array))
		if n, ok := d.fam.arrays[backend.Handle(m.Array)]; err == nil && ok {
			delete(d.fam.arrays, backend.Handle(m.Array))
			s.uncharge(d, n)
		}
		return status(err)
	case *wire.ArrayGetDescriptor:
		a, err := ar.ArrayDescriptor(backend.Handle(m.Array))
		return &wire.ArrayDescriptorReply{Result: int32(backend.ResultOf(err)), Width: a.Width, Height: a.Height,
			Depth: a.Depth, Format: a.Format, Channels: a.Channels, Flags: a.Flags}
	case *wire.Memcpy3DHtoX:
		if n, err := hostBox(m.Width, m.Height, m.Depth); err != nil || n != uint64(len(m.Data)) {
			return status(fmt.Errorf("a %dx%dx%d host box with %d bytes: %w", m.Width, m.Height, m.Depth, len(m.Data), backend.ErrInvalidValue))
		}
		s.Stats.moved(len(m.Data))
		err := ar.Memcpy3D(backend.Copy3D{Src: backend.CopySide{Kind: backend.SideHost},
			Dst:   side(m.DstKind, m.Dst, m.DstPitch, m.DstHeight, m.DstX, m.DstY, m.DstZ),
			Width: m.Width, Height: m.Height, Depth: m.Depth, Host: m.Data, Stream: backend.Handle(m.Stream), Async: m.Async != 0})
		return s.syncStatus(err, m.Async == 0)
	case *wire.Memcpy3DXtoH:
		n, err := hostBox(m.Width, m.Height, m.Depth)
		if err == nil {
			err = s.takePending(nil)
		}
		if err != nil {
			return famReply(m, err)
		}
		out := make([]byte, n)
		err = ar.Memcpy3D(backend.Copy3D{Src: side(m.SrcKind, m.Src, m.SrcPitch, m.SrcHeight, m.SrcX, m.SrcY, m.SrcZ),
			Dst: backend.CopySide{Kind: backend.SideHost}, Width: m.Width, Height: m.Height, Depth: m.Depth,
			Host: out, Stream: backend.Handle(m.Stream)})
		if err != nil {
			return famReply(m, err)
		}
		s.Stats.moved(len(out))
		return &wire.Memcpy3DData{Data: out}
	case *wire.Memcpy3DXtoX:
		err := ar.Memcpy3D(deviceCopy(m.SrcKind, m.Src, m.SrcPitch, m.SrcHeight, m.SrcX, m.SrcY, m.SrcZ,
			m.DstKind, m.Dst, m.DstPitch, m.DstHeight, m.DstX, m.DstY, m.DstZ, m.Width, m.Height, m.Depth,
			backend.Handle(m.Stream), m.Async != 0))
		return s.syncStatus(err, m.Async == 0)
	}
	return nil
}

// deviceCopy is a copy between device memory and arrays, refusing a host side (it would name
// the worker's memory).
func deviceCopy(sk uint32, sp, spitch, sh, sx, sy, sz uint64, dk uint32, dp, dpitch, dh, dx, dy, dz,
	w, h, dpth uint64, stream backend.Handle, async bool) backend.Copy3D {
	if sk == backend.SideHost {
		sk = 0
	}
	if dk == backend.SideHost {
		dk = 0
	}
	return backend.Copy3D{Src: side(sk, sp, spitch, sh, sx, sy, sz), Dst: side(dk, dp, dpitch, dh, dx, dy, dz),
		Width: w, Height: h, Depth: dpth, Stream: stream, Async: async}
}

func resource(typ uint32, h uint64, format, channels uint32, w, ht, pitch, size uint64, flags uint32) backend.ResourceDesc {
	return backend.ResourceDesc{Type: typ, Handle: h, Format: format, Channels: channels, Width: w, Height: ht,
		Pitch: pitch, SizeBytes: size, Flags: flags}
}

func textures(tx backend.Textures, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.TexObjectCreate:
		return handleReply(tx.TexObjectCreate(resource(m.ResType, m.Handle, m.Format, m.Channels, m.Width, m.Height,
			m.Pitch, m.SizeBytes, m.ResFlags), m.TexDesc, m.ViewDesc))
	case *wire.TexObjectDestroy:
		return status(tx.TexObjectDestroy(m.Object))
	case *wire.TexObjectGetResourceDesc:
		r, err := tx.TexObjectResourceDesc(m.Object)
		return &wire.ResourceDescReply{Result: int32(backend.ResultOf(err)), ResType: r.Type, Handle: r.Handle,
			Format: r.Format, Channels: r.Channels, Width: r.Width, Height: r.Height, Pitch: r.Pitch,
			SizeBytes: r.SizeBytes, ResFlags: r.Flags}
	case *wire.SurfObjectCreate:
		return handleReply(tx.SurfObjectCreate(backend.ResourceDesc{Type: m.ResType, Handle: m.Handle}))
	case *wire.SurfObjectDestroy:
		return status(tx.SurfObjectDestroy(m.Object))
	}
	return nil
}

// nodeIDs decodes a dependency list: node ids, 8 bytes each.
func nodeIDs(b []byte) ([]backend.Handle, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("dependencies of %d bytes, not whole node ids: %w", len(b), backend.ErrInvalidValue)
	}
	ids := make([]backend.Handle, len(b)/8)
	for i := range ids {
		ids[i] = backend.Handle(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return ids, nil
}

func (s *Session) graphs(d *device, g backend.Graphs, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.StreamBeginCapture:
		err := g.StreamBeginCapture(backend.Handle(m.Stream), m.Mode)
		if err == nil {
			if d.fam.capturing == nil {
				d.fam.capturing = map[backend.Handle]bool{}
			}
			d.fam.capturing[backend.Handle(m.Stream)] = false
		}
		return status(err)
	case *wire.StreamEndCapture:
		h, err := g.StreamEndCapture(backend.Handle(m.Stream))
		invalid, into := d.fam.capturing[backend.Handle(m.Stream)], d.fam.into[backend.Handle(m.Stream)]
		if err == nil || !isIllegalState(err) {
			delete(d.fam.capturing, backend.Handle(m.Stream))
			delete(d.fam.into, backend.Handle(m.Stream))
		}
		if invalid && err == nil {
			if !into { // a capture into the program's graph leaves the graph to the program
				_ = g.GraphDestroy(h)
			}
			h, err = 0, fmt.Errorf("capture on stream %d: a copy with host memory was refused: %w", m.Stream, backend.ErrStreamCaptureInvalidated)
		}
		return handleReply(h, err)
	case *wire.StreamGetCaptureInfo:
		ci, err := g.StreamCaptureInfo(backend.Handle(m.Stream))
		return &wire.CaptureInfoReply{Result: int32(backend.ResultOf(err)), Status: ci.Status, ID: ci.ID}
	case *wire.GraphCreate:
		return handleReply(g.GraphCreate(m.Flags))
	case *wire.GraphDestroy:
		return status(g.GraphDestroy(backend.Handle(m.Graph)))
	case *wire.GraphGetNodes:
		ids, kinds, err := g.GraphNodes(backend.Handle(m.Graph))
		r := &wire.GraphNodesReply{Result: int32(backend.ResultOf(err)), Types: kinds}
		if len(ids) > 8192 {
			return famReply(m, fmt.Errorf("graph of %d nodes, past the 8192 a reply lists: %w", len(ids), backend.ErrNotSupported))
		}
		for _, id := range ids {
			r.Nodes = binary.LittleEndian.AppendUint64(r.Nodes, uint64(id))
		}
		return r
	case *wire.GraphInstantiate:
		return s.instantiate(d, g, m)
	case *wire.GraphLaunch:
		if d.fam.staged[backend.Handle(m.Exec)] != nil {
			return status(fmt.Errorf("executable graph %d has host nodes: it is launched by stages: %w", m.Exec, backend.ErrNotSupported))
		}
		return status(g.GraphLaunch(backend.Handle(m.Exec), backend.Handle(m.Stream)))
	case *wire.GraphExecDestroy:
		if s.destroyStaged(d, g, backend.Handle(m.Exec)) {
			return status(nil)
		}
		err := g.GraphExecDestroy(backend.Handle(m.Exec))
		if err == nil {
			s.execDestroyed(d, backend.Handle(m.Exec))
		}
		return status(err)
	case *wire.GraphExecUpdate:
		return s.execUpdate(d, g, m)
	}
	return s.graphNode(g, m)
}

func isIllegalState(err error) bool { return backend.ResultOf(err) == backend.ErrIllegalState }

// graphNode adds a node to a graph.
func (s *Session) graphNode(g backend.Graphs, m wire.Message) wire.Message {
	var raw []byte
	switch m := m.(type) {
	case *wire.GraphAddKernelNode:
		raw = m.Deps
	case *wire.GraphAddMemsetNode:
		raw = m.Deps
	case *wire.GraphAddMemcpyNode:
		raw = m.Deps
	case *wire.GraphAddEmptyNode:
		raw = m.Deps
	}
	deps, err := nodeIDs(raw)
	if err != nil {
		return famReply(m, err)
	}
	switch m := m.(type) {
	case *wire.GraphAddKernelNode:
		return handleReply(g.GraphAddKernelNode(backend.Handle(m.Graph), deps, backend.LaunchConfig{
			Function: backend.Handle(m.Function), Grid: [3]uint32{m.GridX, m.GridY, m.GridZ},
			Block: [3]uint32{m.BlockX, m.BlockY, m.BlockZ}, SharedMemBytes: m.SharedMem, Params: m.Params}))
	case *wire.GraphAddMemsetNode:
		return handleReply(g.GraphAddMemsetNode(backend.Handle(m.Graph), deps, backend.MemsetNode{Dst: m.Dst,
			Pitch: m.Pitch, Value: m.Value, ElemSize: m.ElemSize, Width: m.Width, Height: m.Height}))
	case *wire.GraphAddMemcpyNode:
		return handleReply(g.GraphAddMemcpyNode(backend.Handle(m.Graph), deps, deviceCopy(m.SrcKind, m.Src,
			m.SrcPitch, m.SrcHeight, m.SrcX, m.SrcY, m.SrcZ, m.DstKind, m.Dst, m.DstPitch, m.DstHeight, m.DstX,
			m.DstY, m.DstZ, m.Width, m.Height, m.Depth, 0, false)))
	case *wire.GraphAddEmptyNode:
		return handleReply(g.GraphAddEmptyNode(backend.Handle(m.Graph), deps))
	}
	return famReply(m, fmt.Errorf("%T: %w", m, backend.ErrNotSupported))
}

// tensorMap decodes a tensor map's parameters and encodes it.
func tensorMap(tm backend.TensorMaps, m *wire.TensorMapEncode) wire.Message {
	u64s := func(b []byte) ([]uint64, error) {
		if len(b)%8 != 0 {
			return nil, fmt.Errorf("tensor map: %d bytes of 64-bit values: %w", len(b), backend.ErrInvalidValue)
		}
		v := make([]uint64, len(b)/8)
		for i := range v {
			v[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return v, nil
	}
	i32s := func(u []uint32) []int32 {
		v := make([]int32, len(u))
		for i, x := range u {
			v[i] = int32(x)
		}
		return v
	}
	dims, err := u64s(m.GlobalDim)
	if err != nil {
		return famReply(m, err)
	}
	strides, err := u64s(m.GlobalStrides)
	if err != nil {
		return famReply(m, err)
	}
	out, err := tm.TensorMapEncode(backend.TensorMapParams{Im2col: m.Im2col != 0, DataType: m.DataType, Rank: m.Rank,
		Address: m.Address, GlobalDim: dims, GlobalStrides: strides, BoxDim: m.BoxDim, ElementStrides: m.ElementStrides,
		LowerCorner: i32s(m.LowerCorner), UpperCorner: i32s(m.UpperCorner), ChannelsPerPixel: m.ChannelsPerPixel,
		PixelsPerColumn: m.PixelsPerColumn, Interleave: m.Interleave, Swizzle: m.Swizzle, L2Promotion: m.L2Promotion,
		OOBFill: m.OobFill})
	if err != nil {
		return famReply(m, err)
	}
	return &wire.TensorMapReply{Map: out[:]}
}

func linker(l backend.Linker, m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.LinkCreate:
		return handleReply(l.LinkCreate())
	case *wire.LinkAddData:
		return status(l.LinkAddData(backend.Handle(m.Link), m.InputType, m.Name, m.Data))
	case *wire.LinkComplete:
		image, err := l.LinkComplete(backend.Handle(m.Link))
		if err == nil && len(image) > 67100000 {
			err = fmt.Errorf("linked image of %d bytes, past what a frame carries: %w", len(image), backend.ErrNotSupported)
		}
		if err != nil {
			return famReply(m, err)
		}
		return &wire.LinkCompleteReply{Image: image}
	case *wire.LinkDestroy:
		return status(l.LinkDestroy(backend.Handle(m.Link)))
	}
	return nil
}

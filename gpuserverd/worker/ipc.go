package worker

import (
	"errors"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// IPC between the processes of one instance (issue 14): what the session exports is filed in
// the server's registry of its instance (ipcreg.go), and what it opens comes from there. The
// worker remembers both so that the calls ending an object (cuMemFree, cuEventDestroy,
// cuMemRelease, cuMemPoolDestroy, cuMemFreeAsync, cuIpcCloseMemHandle) also end its entry.
//
// Memory: an export moves the object's charge off the session (here and in the server's
// ledger) onto the registry's entry, which the instance pays while any of its processes holds
// the object; an import charges nothing.

// ipcObj is an object of one of the session's contexts.
type ipcObj struct {
	dev    int
	kind   uint32
	object uint64
}

type ipcState struct {
	reg     ipcRegistry // nil: no registry (a worker alone), IPC is refused
	exports map[ipcObj][IpcKeyLen]byte
	imports map[ipcObj][IpcKeyLen]byte
}

// SetIpcRegistry makes the session's exports the instance's, kept by the server.
func (s *Session) SetIpcRegistry(r ipcRegistry) { s.ipc.reg = r }

var errNoRegistry = fmt.Errorf("IPC needs the server's registry of the instance's exports: %w", backend.ErrNotSupported)

// ipcCall answers the IPC messages and the calls that end an exported or imported object; ok
// is false for any other message.
func (s *Session) ipcCall(m wire.Message) (answer wire.Message, ok bool) {
	switch m.(type) {
	case *wire.IpcExport, *wire.IpcImport, *wire.IpcClose, *wire.MemPoolGetAccess, *wire.MemPoolSetAccess:
	case *wire.MemFree, *wire.EventDestroy, *wire.MemRelease, *wire.MemUnmap, *wire.MemPoolDestroy, *wire.MemFreeAsync:
		if len(s.ipc.exports)+len(s.ipc.imports) == 0 {
			return nil, false
		}
	default:
		return nil, false
	}
	d, err := s.dev()
	if err != nil {
		return ipcReply(m, err), true
	}
	switch m := m.(type) {
	case *wire.IpcExport:
		return s.ipcExport(d, m), true
	case *wire.IpcImport:
		return s.ipcImport(d, m), true
	case *wire.IpcClose:
		o := ipcObj{d.index, backend.IpcMemory, m.Ptr}
		if _, ok := s.ipc.imports[o]; !ok {
			return status(fmt.Errorf("close of %#x: not memory opened with cuIpcOpenMemHandle: %w", m.Ptr, backend.ErrInvalidValue)), true
		}
		ipc, _ := d.ctx.(backend.IPC)
		err := ipc.IpcCloseMemory(m.Ptr)
		if err == nil {
			s.ipcForget(o, false)
		}
		return status(err), true
	case *wire.MemPoolGetAccess:
		pa, ok := d.ctx.(backend.PoolAccess)
		if !ok {
			return &wire.ValueReply{Result: int32(backend.ErrNotSupported)}, true
		}
		v, err := pa.MemPoolGetAccess(backend.Handle(m.Pool), m.LocationType, m.LocationID)
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: int32(v)}, true
	case *wire.MemPoolSetAccess:
		pa, ok := d.ctx.(backend.PoolAccess)
		if !ok {
			return status(errNoFamily), true
		}
		return status(pa.MemPoolSetAccess(backend.Handle(m.Pool), m.LocationType, m.LocationID, m.Flags)), true
	}
	return s.ipcEnd(d, m)
}

// ipcReply is the reply an IPC message gets when it fails with err.
func ipcReply(m wire.Message, err error) wire.Message {
	switch m.(type) {
	case *wire.IpcExport:
		return &wire.IpcKeyReply{Result: int32(backend.ResultOf(err))}
	case *wire.IpcImport:
		return &wire.HandleReply{Result: int32(backend.ResultOf(err))}
	case *wire.MemPoolGetAccess:
		return &wire.ValueReply{Result: int32(backend.ResultOf(err))}
	}
	return status(err)
}

// ipcOf is the device's backend IPC, when it has one and the server keeps a registry.
func (s *Session) ipcOf(d *device) (backend.IPC, error) {
	ipc, ok := d.ctx.(backend.IPC)
	if !ok {
		return nil, errNoFamily
	}
	if s.ipc.reg == nil {
		return nil, errNoRegistry
	}
	return ipc, nil
}

func (s *Session) ipcExport(d *device, m *wire.IpcExport) wire.Message {
	ipc, err := s.ipcOf(d)
	if err != nil {
		return ipcReply(m, err)
	}
	o := ipcObj{d.index, m.Kind, m.Object}
	if key, ok := s.ipc.exports[o]; ok { // the driver gives one object the same handle
		return &wire.IpcKeyReply{Key: key[:]}
	}
	if _, ok := s.ipc.imports[o]; ok {
		return ipcReply(m, fmt.Errorf("export of an imported object: %w", backend.ErrInvalidValue))
	}
	var charged uint64
	switch m.Kind {
	case backend.IpcMemory:
		n, ok := d.allocs[m.Object]
		if !ok {
			return ipcReply(m, fmt.Errorf("export of %#x: not the start of a cuMemAlloc allocation: %w", m.Object, backend.ErrInvalidValue))
		}
		charged = n
	case backend.IpcAllocation:
		if a := d.fam.physical[backend.Handle(m.Object)]; a != nil {
			charged = a.bytes
		}
	case backend.IpcEvent, backend.IpcPool, backend.IpcPoolPointer:
	default:
		return ipcReply(m, fmt.Errorf("export of kind %d: %w", m.Kind, backend.ErrInvalidValue))
	}
	blob, fd, err := ipc.IpcExport(m.Kind, m.Object, m.HandleType)
	if err != nil {
		return ipcReply(m, err)
	}
	if len(blob) > MaxIpcBlob {
		if fd != nil {
			fd.Close()
		}
		return ipcReply(m, fmt.Errorf("the backend's handle of %d bytes: %w", len(blob), backend.ErrUnknown))
	}
	key, err := s.ipc.reg.export(byte(m.Kind), uint32(d.index), charged, blob, fd)
	if err != nil {
		return ipcReply(m, registryErr(err))
	}
	// The entry pays for the memory from now on: the allocation's free gives back nothing.
	switch m.Kind {
	case backend.IpcMemory:
		d.allocs[m.Object] = 0
	case backend.IpcAllocation:
		if a := d.fam.physical[backend.Handle(m.Object)]; a != nil {
			a.bytes = 0
		}
	}
	d.used -= charged
	s.Stats.memory(d.ordinal, -int64(charged))
	if s.ipc.exports == nil {
		s.ipc.exports = map[ipcObj][IpcKeyLen]byte{}
	}
	s.ipc.exports[o] = key
	return &wire.IpcKeyReply{Key: key[:]}
}

func (s *Session) ipcImport(d *device, m *wire.IpcImport) wire.Message {
	ipc, err := s.ipcOf(d)
	if err != nil {
		return ipcReply(m, err)
	}
	if len(m.Key) != IpcKeyLen || m.Kind < backend.IpcMemory || m.Kind > backend.IpcPoolPointer {
		return ipcReply(m, fmt.Errorf("a handle of kind %d with a %d-byte key: %w", m.Kind, len(m.Key), backend.ErrInvalidHandle))
	}
	if m.Kind == backend.IpcPoolPointer && !s.imported(d, backend.IpcPool, m.Pool) {
		return ipcReply(m, fmt.Errorf("pool %d was not imported: %w", m.Pool, backend.ErrInvalidValue))
	}
	key := [IpcKeyLen]byte(m.Key)
	blob, fd, err := s.ipc.reg.open(byte(m.Kind), key)
	if err != nil {
		return ipcReply(m, registryErr(err))
	}
	h, err := ipc.IpcImport(m.Kind, blob, fd, backend.Handle(m.Pool), m.Flags)
	if fd != nil {
		fd.Close()
	}
	o := ipcObj{d.index, m.Kind, h}
	_, again := s.ipc.imports[o]
	if err != nil || again {
		// The registry counted this open; the import holds nothing new (a second open of the
		// same object is the driver's one mapping).
		s.ipc.reg.close(byte(m.Kind), key)
	}
	if err != nil {
		return ipcReply(m, err)
	}
	if m.Kind == backend.IpcAllocation && d.fam.physical[backend.Handle(h)] == nil {
		if d.fam.physical == nil {
			d.fam.physical = map[backend.Handle]*vmAlloc{}
		}
		d.fam.physical[backend.Handle(h)] = &vmAlloc{refs: 1} // charged to the exporter's entry
	}
	if s.ipc.imports == nil {
		s.ipc.imports = map[ipcObj][IpcKeyLen]byte{}
	}
	s.ipc.imports[o] = key
	return &wire.HandleReply{Handle: h}
}

// registryErr is the CUDA code of the registry's answer: a key this instance did not file is an
// invalid handle, a full registry out of memory, and a registry gone (a later gpuserverd adopted
// this worker: the registry lived in the one before) not supported any more.
func registryErr(err error) error {
	switch {
	case errors.Is(err, errForeignHandle):
		return fmt.Errorf("%w: %w", err, backend.ErrInvalidHandle)
	case errors.Is(err, errRegistryRefused):
		return fmt.Errorf("%w: %w", err, backend.ErrOutOfMemory)
	}
	return fmt.Errorf("%w: %w", err, backend.ErrNotSupported)
}

func (s *Session) imported(d *device, kind uint32, object uint64) bool {
	_, ok := s.ipc.imports[ipcObj{d.index, kind, object}]
	return ok
}

// ipcForget tells the registry an export (unlist) or import (close) is gone.
func (s *Session) ipcForget(o ipcObj, exported bool) {
	m := s.ipc.imports
	if exported {
		m = s.ipc.exports
	}
	key, ok := m[o]
	if !ok {
		return
	}
	delete(m, o)
	var err error
	if exported {
		err = s.ipc.reg.unlist(byte(o.kind), key)
	} else {
		err = s.ipc.reg.close(byte(o.kind), key)
	}
	if err != nil {
		s.log.Warn("telling the instance's IPC registry an object is gone", "kind", o.kind, "err", err)
	}
}

// ipcEnd runs a call that may end an exported or imported object, then forgets the object's
// entry if it did; ok is false when the call names none (the ordinary path runs it).
func (s *Session) ipcEnd(d *device, m wire.Message) (wire.Message, bool) {
	var kind uint32
	var obj uint64
	switch m := m.(type) {
	case *wire.MemFree:
		kind, obj = backend.IpcMemory, m.Ptr
		if s.imported(d, backend.IpcMemory, m.Ptr) {
			return status(fmt.Errorf("free of %#x, opened with cuIpcOpenMemHandle (close it with cuIpcCloseMemHandle): %w",
				m.Ptr, backend.ErrInvalidValue)), true
		}
		if _, exp := s.ipc.exports[ipcObj{d.index, backend.IpcPoolPointer, m.Ptr}]; exp || s.imported(d, backend.IpcPoolPointer, m.Ptr) {
			kind = backend.IpcPoolPointer // a pool's allocation freed with cuMemFree
		}
	case *wire.EventDestroy:
		kind, obj = backend.IpcEvent, m.Event
	case *wire.MemPoolDestroy:
		kind, obj = backend.IpcPool, m.Pool
	case *wire.MemFreeAsync:
		kind, obj = backend.IpcPoolPointer, m.Ptr
		if s.imported(d, kind, obj) {
			// An imported pointer was never charged here: its free gives nothing back.
			mp, ok := d.ctx.(backend.MemPools)
			if !ok {
				return famReply(m, errNoFamily), true
			}
			_, err := mp.MemFreeAsync(m.Ptr, backend.Handle(m.Stream))
			if err == nil {
				s.ipcForget(ipcObj{d.index, kind, obj}, false)
			}
			return status(err), true
		}
	case *wire.MemRelease, *wire.MemUnmap:
		answer, _ := s.family(m)
		s.ipcSweepAllocations(d)
		return answer, true
	}
	o := ipcObj{d.index, kind, obj}
	_, exp := s.ipc.exports[o]
	_, imp := s.ipc.imports[o]
	if !exp && !imp {
		return nil, false
	}
	var answer wire.Message
	if _, isFree := m.(*wire.MemFree); isFree {
		answer = status(s.free(d, m.(*wire.MemFree).Ptr))
	} else if _, isEvent := m.(*wire.EventDestroy); isEvent {
		answer = status(d.ctx.EventDestroy(backend.Handle(obj)))
	} else {
		answer, _ = s.family(m)
	}
	if resultOf(answer) == 0 {
		s.ipcForget(o, exp)
	}
	return answer, true
}

// ipcSweepAllocations forgets the exported or imported allocation handles whose last reference
// (handle, retains, mappings) is gone.
func (s *Session) ipcSweepAllocations(d *device) {
	for _, side := range []struct {
		objs     map[ipcObj][IpcKeyLen]byte
		exported bool
	}{{s.ipc.exports, true}, {s.ipc.imports, false}} {
		for o := range side.objs {
			if o.dev == d.index && o.kind == backend.IpcAllocation && d.fam.physical[backend.Handle(o.object)] == nil {
				s.ipcForget(o, side.exported)
			}
		}
	}
}

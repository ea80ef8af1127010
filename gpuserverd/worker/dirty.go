package worker

import (
	"gpucloud/gpuserverd/wire"
)

// dirtyTracker knows, during a live migration, which of the session's allocations were copied
// and not written since (clean). It is coarse and errs on the side of copying again: a copy or
// memset into an allocation dirties that allocation; any call that may write device memory in
// ways the worker cannot see (a kernel, a library call, a generic driver call) dirties them all.
// Read under Session.exec, like the frames that change it.
type dirtyTracker struct {
	clean map[int]map[uint64]uint64 // device index -> allocation base -> bytes copied
}

func newDirtyTracker() *dirtyTracker { return &dirtyTracker{clean: map[int]map[uint64]uint64{}} }

// readOnly are the calls that write no device memory the program holds.
func readOnly(m wire.Message) bool {
	switch m.(type) {
	case *wire.DriverVersion, *wire.DeviceInfo, *wire.DeviceAttribute, *wire.MemGetInfo, *wire.MemAlloc,
		*wire.MemcpyDtoH, *wire.MemcpyDtoHStriped, *wire.Synchronize, *wire.StreamSynchronize, *wire.StreamQuery,
		*wire.StreamCreate, *wire.StreamDestroy, *wire.StreamWaitEvent, *wire.EventCreate, *wire.EventDestroy,
		*wire.EventRecord, *wire.EventSynchronize, *wire.EventQuery, *wire.EventElapsedTime, *wire.ModuleGetFunction,
		*wire.ModuleGetGlobal, *wire.ModuleGetGlobalManaged, *wire.StreamSetAccessPolicy, *wire.FuncParamLayout, *wire.FuncGetAttribute, *wire.FuncSetAttribute,
		*wire.OccupancyMaxActiveBlocks, *wire.SetDevice, *wire.NvmlSessionPid, *wire.ResumeOpen, *wire.LanesOpen,
		*wire.CtxSetLimit, *wire.CtxGetLimit, *wire.CtxSetCacheConfig, *wire.CtxGetCacheConfig,
		*wire.BlasCreate, *wire.BlasSetStream, *wire.BlasSetMathMode:
		return true
	}
	return false
}

// note records what m, about to be served on device dev, may write.
func (t *dirtyTracker) note(s *Session, m wire.Message) {
	dev := s.current
	switch m := m.(type) {
	case *wire.MemcpyHtoD:
		t.dirty(s, dev, m.Dst)
	case *wire.MemcpyHtoDStriped:
		t.dirty(s, dev, m.Dst)
	case *wire.MemcpyDtoD:
		t.dirty(s, dev, m.Dst)
	case *wire.Memset:
		t.dirty(s, dev, m.Dst)
	case *wire.MemFree:
		delete(t.clean[dev], m.Ptr)
	default:
		if !readOnly(m) {
			clear(t.clean)
		}
	}
}

// dirty marks the allocation holding p on dev (all of them when p lies in none the worker
// knows: a global, a workspace).
func (t *dirtyTracker) dirty(s *Session, dev int, p uint64) {
	for base, n := range t.clean[dev] {
		if p >= base && p-base < n {
			delete(t.clean[dev], base)
			return
		}
	}
	if dev < len(s.devs) && s.devs[dev] != nil {
		for base, n := range s.devs[dev].allocs {
			if p >= base && p-base < n {
				return // known and not clean: nothing to change
			}
		}
	}
	clear(t.clean)
}

func (t *dirtyTracker) isClean(dev int, base, n uint64) bool {
	got, ok := t.clean[dev][base]
	return ok && got == n
}

func (t *dirtyTracker) markClean(dev int, base, n uint64) {
	if t.clean[dev] == nil {
		t.clean[dev] = map[uint64]uint64{}
	}
	t.clean[dev][base] = n
}

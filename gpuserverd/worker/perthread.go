package worker

import (
	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// maxPerThreadStreams bounds the per-thread default streams a guest may have made on one device
// (one per guest thread that used one): past it, a new thread's is refused as an invalid handle.
const maxPerThreadStreams = 1024

// perThreadStreams are a device's per-thread default streams: the guest's tagged handle
// (wire.PerThreadStream | its thread's number) -> the stream made for it.
type perThreadStreams map[uint64]backend.Handle

// resolvePerThread replaces a guest's per-thread default stream in m (CU_STREAM_PER_THREAD, the
// _ptsz calls) with the current device's stream for that guest thread, made on first use as a
// blocking stream (flags 0), which, as CUDA's per-thread default stream, synchronises with the
// legacy default stream. A handle it cannot resolve (a destroy, a device that cannot be used,
// the limit) stays as sent, and the backend refuses it as an unknown stream.
func (s *Session) resolvePerThread(m wire.Message) {
	sn, ok := m.(wire.StreamNamer)
	if !ok {
		return
	}
	p := sn.StreamField()
	if *p&wire.PerThreadStream == 0 {
		return
	}
	if _, destroy := m.(*wire.StreamDestroy); destroy {
		return // a per-thread default stream is not the program's to destroy
	}
	if h, ok := s.perThreadStream(*p); ok {
		*p = uint64(h)
	}
}

// perThreadStream is the current device's stream for the tagged handle tag, made if need be.
func (s *Session) perThreadStream(tag uint64) (backend.Handle, bool) {
	d, err := s.dev()
	if err != nil {
		return 0, false
	}
	if h, ok := d.perThread[tag]; ok {
		return h, true
	}
	if len(d.perThread) >= maxPerThreadStreams {
		return 0, false
	}
	h, err := d.ctx.StreamCreate(0)
	if err != nil {
		return 0, false
	}
	if d.perThread == nil {
		d.perThread = perThreadStreams{}
	}
	d.perThread[tag] = h
	return h, true
}

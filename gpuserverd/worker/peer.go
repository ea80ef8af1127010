package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// Peer access between a session's GPUs (issue 19). The guest's device ordinals are the session's
// GPUs in the order granted; a copy between two of them is done here, on the server.
const (
	errPeerAccessAlreadyEnabled backend.Result = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	errPeerAccessNotEnabled     backend.Result = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
)

// peerCopyChunk bounds the host staging of a copy between two devices' contexts.
const peerCopyChunk = 4 << 20

// devAt returns the session's device index i, creating its context on first use.
func (s *Session) devAt(i int) (*device, error) {
	if i < 0 || i >= len(s.devs) {
		return nil, fmt.Errorf("device %d of %d granted: %w", i, len(s.devs), backend.ErrInvalidDevice)
	}
	cur := s.current
	s.current = i
	d, err := s.dev()
	s.current = cur
	return d, err
}

// peerAccess is cuCtxEnablePeerAccess / cuCtxDisablePeerAccess from the current device to m.Peer.
func (s *Session) peerAccess(m *wire.PeerAccess) error {
	if m.Flags != 0 {
		return fmt.Errorf("peer access flags %#x (must be 0): %w", m.Flags, backend.ErrInvalidValue)
	}
	if int(m.Peer) >= len(s.devs) || int(m.Peer) == s.current {
		return fmt.Errorf("peer device %d (current %d, %d granted): %w", m.Peer, s.current, len(s.devs), backend.ErrInvalidDevice)
	}
	if _, err := s.devAt(int(m.Peer)); err != nil {
		return err
	}
	if s.peers == nil {
		s.peers = map[[2]int]bool{}
	}
	key := [2]int{s.current, int(m.Peer)}
	switch {
	case m.Enable != 0 && s.peers[key]:
		return fmt.Errorf("device %d already reaches device %d: %w", s.current, m.Peer, errPeerAccessAlreadyEnabled)
	case m.Enable == 0 && !s.peers[key]:
		return fmt.Errorf("device %d does not reach device %d: %w", s.current, m.Peer, errPeerAccessNotEnabled)
	}
	s.peers[key] = m.Enable != 0
	return nil
}

// memcpyPeer copies between two of the session's devices after the work on the current device's
// stream.
func (s *Session) memcpyPeer(m *wire.MemcpyPeer) error {
	cur, err := s.dev()
	if err != nil {
		return err
	}
	src, err := s.devAt(int(m.SrcDevice))
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	dst, err := s.devAt(int(m.DstDevice))
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	if m.Bytes == 0 {
		return nil
	}
	if err := cur.ctx.StreamSynchronize(backend.Handle(m.Stream)); err != nil {
		return err
	}
	return s.copyBetween(dst, m.Dst, src, m.Src, m.Bytes)
}

// copyBetween copies bytes from src's srcPtr to dst's dstPtr, directly where the backend can.
func (s *Session) copyBetween(dst *device, dstPtr uint64, src *device, srcPtr, bytes uint64) error {
	if dst == src {
		return dst.ctx.MemcpyDtoD(dstPtr, srcPtr, bytes, 0, false)
	}
	if pc, ok := dst.ctx.(backend.PeerCopier); ok {
		return pc.MemcpyPeer(dstPtr, src.ctx, srcPtr, bytes, 0)
	}
	buf := make([]byte, min(bytes, peerCopyChunk))
	for off := uint64(0); off < bytes; off += uint64(len(buf)) {
		n := min(bytes-off, uint64(len(buf)))
		if err := src.ctx.MemcpyDtoH(buf[:n], srcPtr+off, 0, false); err != nil {
			return fmt.Errorf("peer copy, reading device %d: %w", src.index, err)
		}
		if err := dst.ctx.MemcpyHtoD(dstPtr+off, buf[:n], 0, false); err != nil {
			return fmt.Errorf("peer copy, writing device %d: %w", dst.index, err)
		}
	}
	return nil
}

// owner returns the session's device holding [ptr, ptr+bytes) in a cuMemAlloc allocation, or nil.
// Only asked where more than one device is in use.
func (s *Session) owner(ptr, bytes uint64) *device {
	for _, d := range s.devs {
		if d == nil {
			continue
		}
		for base, n := range d.allocs {
			if ptr >= base && ptr+bytes <= base+n {
				return d
			}
		}
	}
	return nil
}

// crossDeviceDtoD routes a cuMemcpyDtoD whose sides lie on different devices of the session (as
// unified addressing lets a program ask) to a peer copy; ok is false for a copy within cur.
func (s *Session) crossDeviceDtoD(cur *device, m *wire.MemcpyDtoD) (err error, ok bool) {
	used := 0
	for _, d := range s.devs {
		if d != nil {
			used++
		}
	}
	if used < 2 || m.Bytes == 0 {
		return nil, false
	}
	src, dst := s.owner(m.Src, m.Bytes), s.owner(m.Dst, m.Bytes)
	if src == nil || dst == nil || (src == cur && dst == cur) {
		return nil, false
	}
	if err := cur.ctx.StreamSynchronize(backend.Handle(m.Stream)); err != nil {
		return err, true
	}
	return s.copyBetween(dst, m.Dst, src, m.Src, m.Bytes), true
}

// waitPeerEvent makes a stream of the current device wait for an event of another device: the
// worker runs one call at a time, so waiting for the event here orders everything the guest
// queues on the stream afterwards after it (the wait blocks the session meanwhile).
func (s *Session) waitPeerEvent(m *wire.StreamWaitPeerEvent) error {
	cur, err := s.dev()
	if err != nil {
		return err
	}
	if err := cur.ctx.StreamQuery(backend.Handle(m.Stream)); err != nil && backend.ResultOf(err) != backend.ErrNotReady {
		return fmt.Errorf("stream wait: %w", err) // the stream must be the current device's
	}
	d, err := s.devAt(int(m.EventDevice))
	if err != nil {
		return fmt.Errorf("stream wait, event's device: %w", err)
	}
	if err := d.ctx.EventSynchronize(backend.Handle(m.Event)); err != nil {
		return fmt.Errorf("stream wait on device %d's event: %w", m.EventDevice, err)
	}
	return nil
}

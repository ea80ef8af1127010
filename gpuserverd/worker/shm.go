package worker

import (
	"bufio"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A guest on the same host connects over a Unix socket and asks for a shared arena (ShmOpen).
// The worker creates it (a memfd), maps it, registers it with the driver as pinned memory and
// passes the descriptor back with the reply; a copy then names a range of the arena, and the
// device DMAs straight from or to it: no bytes on the socket, no staging copy in the worker.
// The guest hands out its pinned allocations from the arena and stages pageable copies through
// chunks of it (docs/gpuserverd/transports.md, "Shared memory").

// arena is the session's shared memory.
type arena struct {
	mem []byte
	reg backend.Context // the context it is registered with (portable: every context sees it)
}

// fdSender is a connection that can pass a descriptor to its peer: a Unix socket.
type fdSender interface {
	sendWithFD(frame []byte, fd int) error
	socketFD() int
}

// shmOpen answers ShmOpen; on success the reply has gone out with the arena's descriptor and the
// returned message is nil.
func (s *Session) shmOpen(m *wire.ShmOpen, req uint32) (wire.Message, error) {
	refuse := func(r backend.Result, format string, args ...any) (wire.Message, error) {
		return &wire.ShmOpenReply{Result: int32(r), Message: fmt.Sprintf("ShmOpen: "+format, args...)}, nil
	}
	snd, ok := s.conn.(fdSender)
	switch {
	case !ok || !isUnixConn(s.conn):
		return refuse(backend.ErrNotSupported, "shared memory needs a Unix-socket connection from the same host")
	case s.shm != nil:
		return refuse(backend.ErrInvalidValue, "the session's arena is already open")
	case m.Bytes < wire.ShmMin || m.Bytes > wire.ShmMax:
		return refuse(backend.ErrInvalidValue, "bytes %d outside [%d, %d]", m.Bytes, uint64(wire.ShmMin), uint64(wire.ShmMax))
	case m.Bytes%uint64(syscall.Getpagesize()) != 0:
		return refuse(backend.ErrInvalidValue, "bytes %d not a multiple of the page size %d", m.Bytes, syscall.Getpagesize())
	}
	if max := s.cfg.shmMax(); m.Bytes > max {
		r, _ := refuse(backend.ErrOutOfMemory, "%d bytes over this server's arena limit per session, %d", m.Bytes, max)
		r.(*wire.ShmOpenReply).Bytes = offer(max)
		return r, nil
	}
	if s.budget != nil {
		ok, avail, err := s.budget(m.Bytes)
		if err != nil {
			return refuse(backend.ErrOutOfMemory, "%v", err)
		}
		if !ok {
			r, _ := refuse(backend.ErrOutOfMemory, "%d bytes: the arenas of this server's sessions may hold only %d more", m.Bytes, avail)
			r.(*wire.ShmOpenReply).Bytes = offer(min(avail, s.cfg.shmMax()))
			return r, nil
		}
	}
	reply, err := s.makeArena(m, req, snd)
	if s.shm == nil && s.budget != nil { // not made: give the bytes back
		if _, _, berr := s.budget(0); berr != nil {
			s.log.Warn("arena: giving its bytes back", "err", berr)
		}
	}
	return reply, err
}

// offer is the largest arena a guest refused for room may ask for instead: whole MiB, at least
// wire.ShmMin (0: none).
func offer(room uint64) uint64 {
	room &^= 1<<20 - 1
	if room < wire.ShmMin {
		return 0
	}
	return room
}

func (c Config) shmMax() uint64 {
	if c.ShmMax == 0 || c.ShmMax > wire.ShmMax {
		return wire.ShmMax
	}
	return c.ShmMax
}

// makeArena creates, maps and registers the arena and sends it to the guest.
func (s *Session) makeArena(m *wire.ShmOpen, req uint32, snd fdSender) (wire.Message, error) {
	refuse := func(r backend.Result, format string, args ...any) (wire.Message, error) {
		return &wire.ShmOpenReply{Result: int32(r), Message: fmt.Sprintf("ShmOpen: "+format, args...)}, nil
	}
	d, err := s.dev()
	if err != nil {
		return refuse(backend.ResultOf(err), "no device: %v", err)
	}
	fd, err := unix.MemfdCreate("gpucloud-shm-"+s.cfg.SessionID, unix.MFD_CLOEXEC)
	if err != nil {
		return refuse(backend.ErrOutOfMemory, "memfd: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(m.Bytes)); err != nil {
		return refuse(backend.ErrOutOfMemory, "sizing the arena: %v", err)
	}
	mem, err := mapArena(fd, m.Bytes, m.Address)
	if err != nil {
		return refuse(backend.ErrOutOfMemory, "mapping the arena: %v", err)
	}
	if err := d.ctx.HostRegister(mem); err != nil {
		unmapArena(mem)
		return refuse(backend.ResultOf(err), "registering the arena with the driver: %v", err)
	}
	s.shm = &arena{mem: mem, reg: d.ctx}
	reply := &wire.ShmOpenReply{Bytes: m.Bytes}
	if dp := s.shmDevicePointer().(*wire.HandleReply); dp.Result == 0 { // else none: not device-mapped
		reply.DeviceAddress = dp.Handle
	}
	frame := wire.AppendFrame(nil, reply, 0, req)
	if err := s.w.Flush(); err != nil {
		return nil, err
	}
	if err := snd.sendWithFD(frame, fd); err != nil {
		return nil, fmt.Errorf("sending the arena: %w", err)
	}
	// From here on frames travel through the arena's rings; the guest sends nothing before it
	// has this reply, so nothing is left in the socket's buffer.
	alive := peerAlive(snd.socketFD())
	s.r = bufio.NewReaderSize(newShmRing(mem, 0, alive), 256<<10)
	s.w = bufio.NewWriterSize(newShmRing(mem, 1, alive), 256<<10)
	s.log.Info("shared arena open", "bytes", m.Bytes)
	return nil, nil
}

// mapArena maps the arena's memfd, at the address the guest reserved for it where that is free in
// this process too: a driver that maps registered host memory at its host address (unified
// addressing) then gives the arena one address in the guest, here and on the device, so a
// program may hand a pinned pointer straight to a kernel. Anywhere else otherwise.
func mapArena(fd int, bytes, at uint64) ([]byte, error) {
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	if at != 0 && at%uint64(unix.Getpagesize()) == 0 && at+bytes > at {
		want := unsafe.Add(unsafe.Pointer(nil), uintptr(at)) // an address in this process, not a Go object
		p, err := unix.MmapPtr(fd, 0, want, uintptr(bytes), prot, flags|unix.MAP_FIXED_NOREPLACE)
		if err == nil && p == want {
			return unsafe.Slice((*byte)(p), bytes), nil
		}
		if err == nil { // an old kernel took the address as a hint
			unix.MunmapPtr(p, uintptr(bytes))
		}
	}
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(bytes), prot, flags)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// unmapArena undoes mapArena (its mappings are not unix.Mmap's, which keeps a table of its own).
func unmapArena(mem []byte) {
	unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)))
}

// span is the arena's bytes [off, off+n), or an error naming the range.
func (a *arena) span(off, n uint64) ([]byte, error) {
	if a == nil {
		return nil, fmt.Errorf("shared-memory copy before ShmOpen: %w", backend.ErrInvalidValue)
	}
	if off < wire.ShmCtl || off > uint64(len(a.mem)) || n > uint64(len(a.mem))-off {
		return nil, fmt.Errorf("arena range %d+%d outside its data bytes [%d, %d): %w", off, n, wire.ShmCtl, len(a.mem), backend.ErrInvalidValue)
	}
	return a.mem[off : off+n], nil
}

// An asynchronous arena copy sent with a reply is a chunk of a pageable copy staged through the
// arena: it is answered once its bytes have moved, since the guest then reuses the chunk. One
// sent without a reply is the guest's own pinned memory and, as in CUDA, may still run.
func (s *Session) htodShm(d *device, m *wire.MemcpyHtoDShm, h wire.Header) wire.Message {
	src, err := s.shm.span(m.Offset, m.Bytes)
	if err == nil {
		s.Stats.moved(int(m.Bytes))
		err = d.ctx.MemcpyHtoD(m.Dst, src, backend.Handle(m.Stream), m.Async != 0)
	}
	return s.shmStatus(d, err, m.Async != 0, m.Stream, h)
}

func (s *Session) dtohShm(d *device, m *wire.MemcpyDtoHShm, h wire.Header) wire.Message {
	dst, err := s.shm.span(m.Offset, m.Bytes)
	if err == nil {
		s.Stats.moved(int(m.Bytes))
		err = d.ctx.MemcpyDtoH(dst, m.Src, backend.Handle(m.Stream), m.Async != 0)
	}
	return s.shmStatus(d, err, m.Async != 0, m.Stream, h)
}

func (s *Session) shmStatus(d *device, err error, async bool, stream uint64, h wire.Header) wire.Message {
	if err == nil && async && h.Flags&wire.FlagNoReply == 0 {
		err = d.ctx.StreamSynchronize(backend.Handle(stream))
	}
	return s.syncStatus(err, !async)
}

// closeShm unregisters and unmaps the arena; the contexts are still open.
func (s *Session) closeShm() {
	if s.shm == nil {
		return
	}
	if err := s.shm.reg.Synchronize(); err != nil {
		s.log.Warn("arena: synchronising before unregister", "err", err)
	}
	if err := s.shm.reg.HostUnregister(s.shm.mem); err != nil {
		s.log.Warn("arena: unregister", "err", err)
	}
	unmapArena(s.shm.mem)
	s.shm = nil
}

// isUnixConn tells whether the connection is a Unix socket (a client on this host).
func isUnixConn(c any) bool {
	u, ok := c.(interface{ isUnix() bool })
	return ok && u.isUnix()
}

func (c *blockingConn) socketFD() int { return c.fd }

func (c *blockingConn) isUnix() bool {
	sa, err := syscall.Getsockname(c.fd)
	if err != nil {
		return false
	}
	_, ok := sa.(*syscall.SockaddrUnix)
	return ok
}

// sendWithFD writes frame with fd attached to its first byte (SCM_RIGHTS).
func (c *blockingConn) sendWithFD(frame []byte, fd int) error {
	n, err := syscall.SendmsgN(c.fd, frame, syscall.UnixRights(fd), nil, 0)
	if err != nil {
		return err
	}
	if n < len(frame) {
		_, err = c.Write(frame[n:])
	}
	return err
}

// shmDevicePointer answers ShmDevicePointer: the device address of the whole arena, so the guest's
// mapped pinned memory in it is reached by kernels with no copy. Refused without an arena (TCP: the
// program's memory is in another machine's address space) or a backend that cannot map host memory.
func (s *Session) shmDevicePointer() wire.Message {
	if s.shm == nil {
		return &wire.HandleReply{Result: int32(backend.ErrNotSupported)}
	}
	hm, ok := s.shm.reg.(backend.HostMapper)
	if !ok {
		return &wire.HandleReply{Result: int32(backend.ErrNotSupported)}
	}
	p, err := hm.HostDevicePointer(s.shm.mem)
	return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: p}
}

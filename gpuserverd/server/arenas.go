package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"

	"gpucloud/gpuserverd/worker"
)

// A session's shared arena (docs/gpuserverd/transports.md, "Shared memory") is host memory the driver
// pins: a host resource, so the server bounds it, per session (Config.ShmSessionMax, which the
// worker enforces alone) and across all its sessions (Config.ShmTotalMax, which needs the server:
// workers are separate processes). Before creating an arena a worker asks the server over a
// socket pair (the worker's fd worker.ArenaFD) to hold its size; the server answers whether it
// fits and how much this session could hold. A session's bytes are dropped when its worker exits,
// however it exits (a SIGKILLed worker included): the server holds the books, not the worker.

// arenaBudget is what the server's sessions' arenas hold, against the total limit.
type arenaBudget struct {
	mu    sync.Mutex
	total uint64
	used  uint64
	held  map[int]uint64 // by worker pid
}

func newArenaBudget(total uint64) *arenaBudget {
	return &arenaBudget{total: total, held: map[int]uint64{}}
}

// set makes pid's holding n bytes if that fits; avail is how many pid could hold now.
func (b *arenaBudget) set(pid int, n uint64) (ok bool, avail uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	others := b.used - b.held[pid]
	if others < b.total {
		avail = b.total - others
	}
	if n > avail {
		return false, avail
	}
	b.used = others + n
	if n == 0 {
		delete(b.held, pid)
	} else {
		b.held[pid] = n
	}
	return true, avail
}

// force enters bytes pid's arena holds already (an adopted worker's), whatever the total says.
func (b *arenaBudget) force(pid int, n uint64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n - b.held[pid]
	b.held[pid] = n
}

// drop forgets pid's bytes (its worker has exited).
func (b *arenaBudget) drop(pid int) { b.set(pid, 0) }

func (b *arenaBudget) inUse() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// serveArenas answers one worker's requests until it closes its end. A malformed request ends
// the conversation (the worker is ours: that is a bug) and the worker then refuses arenas.
func (s *Server) serveArenas(c *net.UnixConn, pid int, log *slog.Logger) {
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		want, err := worker.DecodeArenaRequest(buf[:n])
		if err != nil {
			log.Warn("arena budget: malformed request from the worker", "err", err)
			return
		}
		ok, avail := s.arenas.set(pid, want)
		if !ok {
			log.Info("arena over the server's total", "bytes", want, "available", avail, "total", s.arenas.total)
		}
		if _, err := c.Write(worker.EncodeArenaReply(ok, avail)); err != nil {
			return
		}
	}
}

// seqpacketPair is a connected pair of Unix seqpacket sockets: this end as a conn, the other as
// a file for a child to inherit.
func seqpacketPair(name string) (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s socket: %w", name, err)
	}
	here := os.NewFile(uintptr(fds[0]), name)
	defer here.Close()
	c, err := net.FileConn(here)
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("%s socket: %w", name, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		syscall.Close(fds[1])
		return nil, nil, errors.New(name + " socket: not a Unix socket")
	}
	return uc, os.NewFile(uintptr(fds[1]), name+"-worker"), nil
}

// physicalMemory is the machine's RAM in bytes (0 when unknown).
func physicalMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

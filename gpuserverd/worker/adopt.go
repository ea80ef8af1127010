package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// A worker outlives the gpuserverd that started it (issue 18): the guest's connection is the
// worker's, so a server restart (upgrade, crash, SIGKILL) need not end the session. The worker
// listens on <AdoptDir>/<pid>.sock; a new gpuserverd that finds the session in its state file
// connects there and sends fresh ends of the three server sockets (lanes, arena budget, memory
// ledger) with SCM_RIGHTS. The worker answers one JSON line, an AdoptHello, and from then on
// writes its Snapshot lines on that connection instead of the dead server's stats pipe. A worker
// no server adopts within AdoptTimeout of losing its server ends its session: a session nobody
// meters must not run on.

// AdoptHello is the worker's first line to a server that adopts it: what the server must put
// back on its books.
type AdoptHello struct {
	SessionID string `json:"session_id"`
	Pid       int    `json:"pid"`
	// Memory is the device memory the session holds against its instance's quota, per device
	// index of the session.
	Memory map[int]uint64 `json:"memory"`
	// Arena is the bytes the session's shared arena holds against the server's total.
	Arena uint64 `json:"arena"`
	// Snapshot is the session as it stands, so the server bills nothing its worker's state
	// forbids (a move paused mid-way, a guest away) before the next report.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// AdoptFDs is how many descriptors an adopting server sends: lanes, arena budget, memory ledger.
const AdoptFDs = 3

// DefaultAdoptTimeout is how long a worker whose server is gone waits to be adopted.
const DefaultAdoptTimeout = time.Minute

// AdoptSocketPath is where the worker of pid listens for an adopting server.
func AdoptSocketPath(dir string, pid int) string {
	return filepath.Join(dir, strconv.Itoa(pid)+".sock")
}

// serverLink is the worker's side of its server: swapped whole when a new server adopts it.
type serverLink struct {
	wmu    sync.Mutex // held while a line goes out on the stats stream, so lines never interleave
	mu     sync.Mutex
	stats  io.Writer
	arenas *net.UnixConn
	memory *net.UnixConn
	// held is what the session holds on the server's books, kept here so a new server can be
	// told: memory per device index, and the arena's bytes.
	held  map[int]uint64
	arena uint64
	lost  chan struct{} // closed when the current server is gone; nil while one is attached
}

func newServerLink(stats io.Writer, arenas, memory *net.UnixConn) *serverLink {
	return &serverLink{stats: stats, arenas: arenas, memory: memory, held: map[int]uint64{}}
}

// writeStats sends one snapshot line to whichever server is attached; a dead one is ignored.
func (l *serverLink) writeStats(snap Snapshot) {
	b, _ := json.Marshal(snap)
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	w := l.stats
	l.mu.Unlock()
	if w != nil {
		_, _ = w.Write(append(b, '\n'))
	}
}

// ledger reserves or gives back device memory on the attached server's books. The local tally
// follows what the session holds even when the server cannot be reached (a give-back while it
// restarts), so an adopting server is told the truth.
func (l *serverLink) ledger(device int, delta int64) (bool, uint64, error) {
	l.mu.Lock()
	c := l.memory
	l.mu.Unlock()
	var ok bool
	var used uint64
	var err error
	if c == nil {
		err = errors.New("instance memory ledger: gpuserverd is restarting")
	} else {
		ok, used, err = socketLedger(c)(device, delta)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case delta < 0:
		l.held[device] -= min(uint64(-delta), l.held[device])
	case delta > 0 && ok && err == nil:
		l.held[device] += uint64(delta)
	}
	return ok, used, err
}

// budget asks the attached server to hold n bytes of arena.
func (l *serverLink) budget(n uint64) (bool, uint64, error) {
	l.mu.Lock()
	c := l.arenas
	l.mu.Unlock()
	if c == nil {
		if n == 0 {
			l.mu.Lock()
			l.arena = 0
			l.mu.Unlock()
		}
		return false, 0, errors.New("arena budget: gpuserverd is restarting")
	}
	ok, avail, err := socketBudget(c)(n)
	if err == nil && (ok || n == 0) {
		l.mu.Lock()
		l.arena = n
		l.mu.Unlock()
	}
	return ok, avail, err
}

// serverGone notes that the attached server has gone (its lane socket closed): requests fail at
// once until another adopts the worker, and end is called if none does within timeout.
func (l *serverLink) serverGone(timeout time.Duration, end func(), log *slog.Logger) {
	l.mu.Lock()
	if l.lost != nil {
		l.mu.Unlock()
		return
	}
	lost := make(chan struct{})
	l.lost = lost
	if l.arenas != nil {
		l.arenas.Close()
	}
	if l.memory != nil {
		l.memory.Close()
	}
	l.stats, l.arenas, l.memory = nil, nil, nil
	l.mu.Unlock()
	log.Warn("gpuserverd is gone; waiting to be adopted by a new one", "timeout", timeout)
	go func() {
		select {
		case <-lost:
		case <-time.After(timeout):
			l.mu.Lock()
			adopted := l.lost != lost
			l.mu.Unlock()
			if !adopted {
				log.Error("no gpuserverd adopted this worker in time; ending its session")
				end()
			}
		}
	}()
}

// orphaned says whether the worker has lost its server and none has adopted it since.
func (l *serverLink) orphaned() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost != nil
}

// attach installs a new server's sockets and stats stream and sends the server its AdoptHello,
// the stream's first line (no snapshot line can come before it), with the session's snapshot.
func (l *serverLink) attach(stats io.Writer, arenas, memory *net.UnixConn, sessionID string, snap func() Snapshot) (AdoptHello, error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	h := l.install(stats, arenas, memory, sessionID)
	if snap != nil {
		sn := snap()
		h.Snapshot = &sn
	}
	b, _ := json.Marshal(h)
	if _, err := stats.Write(append(b, '\n')); err != nil {
		return h, fmt.Errorf("answering the adopting server: %w", err)
	}
	return h, nil
}

// install puts a new server's sockets and stats stream in place; it returns what to tell the
// server.
func (l *serverLink) install(stats io.Writer, arenas, memory *net.UnixConn, sessionID string) AdoptHello {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.arenas != nil {
		l.arenas.Close()
	}
	if l.memory != nil {
		l.memory.Close()
	}
	l.stats, l.arenas, l.memory = stats, arenas, memory
	if l.lost != nil {
		close(l.lost)
		l.lost = nil
	}
	h := AdoptHello{SessionID: sessionID, Pid: os.Getpid(), Memory: map[int]uint64{}, Arena: l.arena}
	for d, n := range l.held {
		if n > 0 {
			h.Memory[d] = n
		}
	}
	return h
}

// listenAdopt listens on the worker's adoption socket; only a process of the worker's own user
// (gpuserverd) may connect (the directory is the server's, mode 0700, and each peer is checked).
func listenAdopt(dir string) (*net.UnixListener, string, error) {
	path := AdoptSocketPath(dir, os.Getpid())
	os.Remove(path) // a stale socket of a dead process with our pid
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, "", fmt.Errorf("adoption socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, path, nil
}

// serveAdoptions accepts adopting servers until ln closes. adopt is called with each accepted
// connection after its descriptors have been received.
func (s *Session) serveAdoptions(ln *net.UnixListener, link *serverLink, adoptTimeout time.Duration, end func()) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if err := s.adopt(c, link, adoptTimeout, end); err != nil {
			s.log.Warn("adoption refused", "err", err)
			c.Close()
		}
	}
}

func (s *Session) adopt(c *net.UnixConn, link *serverLink, adoptTimeout time.Duration, end func()) error {
	if err := samePeerUser(c); err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(budgetTimeout))
	buf, oob := make([]byte, 16), make([]byte, syscall.CmsgSpace(4*AdoptFDs))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return fmt.Errorf("reading the adopting server's sockets: %w", err)
	}
	conns, err := receivedConns(oob[:oobn])
	if err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	lanesUC, arenasUC, memUC := conns[0], conns[1], conns[2]
	hello, err := link.attach(c, arenasUC, memUC, s.cfg.SessionID, s.Stats.Snapshot)
	if err != nil {
		return err
	}
	s.log.Info("adopted by a new gpuserverd", "memory", hello.Memory, "arena", hello.Arena)
	go func() {
		s.serveLaneSocket(lanesUC)
		lanesUC.Close()
		link.serverGone(adoptTimeout, end, s.log)
	}()
	return nil
}

// samePeerUser refuses a peer that is not of this process's user.
func samePeerUser(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("adoption from uid %d refused", cred.Uid)
	}
	return nil
}

// receivedConns turns the AdoptFDs descriptors of one control message into Unix sockets.
func receivedConns(oob []byte) ([]*net.UnixConn, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("adoption without one control message: %v", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != AdoptFDs {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, fmt.Errorf("adoption with %d descriptors, want %d: %v", len(fds), AdoptFDs, err)
	}
	var out []*net.UnixConn
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "adopted")
		nc, err := net.FileConn(f)
		f.Close()
		uc, ok := nc.(*net.UnixConn)
		if err != nil || !ok {
			for _, c := range out {
				c.Close()
			}
			return nil, fmt.Errorf("adoption: descriptor is not a Unix socket: %v", err)
		}
		out = append(out, uc)
	}
	return out, nil
}

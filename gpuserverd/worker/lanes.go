package worker

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// LanesFD is the worker's end of a Unix socket on which the server passes lane connections
// (SCM_RIGHTS), each with the payload of the LaneHello it read from it.
const LanesFD = 5

// lanes are a session's extra connections for striped bulk copies. One loopback TCP stream
// moves about 4 GB/s on the GPU host, because one thread on each side copies every byte; with
// several streams, several threads copy at once (see docs/gpuserverd/transports.md, "Lanes").
type lanes struct {
	session string
	log     *slog.Logger

	mu      sync.Mutex
	enabled bool    // lane connections can reach this worker
	key     []byte  // nil until LanesOpen
	conns   []*lane // by lane index; nil until attached
}

// opened says whether the guest ever asked for lanes on this worker.
func (l *lanes) opened() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.key != nil
}

// lane is one attached connection and the goroutine that reads or writes its share of a copy.
type lane struct {
	conn io.ReadWriteCloser
	jobs chan laneJob
}

// laneJob fills buf from the lane (read) or sends buf on it, then reports on done.
type laneJob struct {
	buf  []byte
	read bool
	done chan error
}

func (l *lane) serve() {
	for j := range l.jobs {
		var err error
		if j.read {
			_, err = io.ReadFull(l.conn, j.buf)
		} else {
			_, err = l.conn.Write(j.buf)
		}
		if err != nil {
			err = fmt.Errorf("lane: %w", err)
		}
		j.done <- err
	}
}

// EnableLanes lets the session open lanes: the process can receive lane connections.
func (s *Session) EnableLanes() {
	s.lanes.mu.Lock()
	s.lanes.enabled = true
	s.lanes.mu.Unlock()
}

// open answers LanesOpen: a fresh key for n lanes. A second LanesOpen (a guest that resumed its
// stream after a cut, whose lanes broke with it) ends the lanes open and their key: only lanes
// presenting the new key attach from then on.
func (ls *lanes) open(n uint32) *wire.LanesOpenReply {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case !ls.enabled:
		return &wire.LanesOpenReply{Result: int32(backend.ErrNotSupported)}
	case n == 0 || n > wire.MaxLanes:
		return &wire.LanesOpenReply{Result: int32(backend.ErrInvalidValue)}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return &wire.LanesOpenReply{Result: int32(backend.ErrUnknown)}
	}
	ls.closeLocked()
	ls.key, ls.conns = key, make([]*lane, n)
	return &wire.LanesOpenReply{Lanes: n, Key: key}
}

// Attach takes a lane connection whose LaneHello payload is hello, answering Status on it. A
// refused lane is told why and closed (after PauseLaneRefusal, on a goroutine of its own); the
// session is left as it was.
func (s *Session) Attach(conn io.ReadWriteCloser, hello []byte) error {
	err := s.lanes.attach(conn, hello)
	reply := wire.AppendFrame(nil, status(err), 0, 0)
	if err != nil {
		go func() {
			PauseLaneRefusal()
			conn.Write(reply)
			conn.Close()
		}()
		return err
	}
	if _, werr := conn.Write(reply); werr != nil {
		s.lanes.detach(conn)
		conn.Close()
		return fmt.Errorf("answering lane: %w", werr)
	}
	return nil
}

// A LaneHello comes before any authentication, so its refusal must not tell whether the session
// it names is live (issue 13, finding 12): the server refuses an unknown session with the same
// code and words as the worker refuses a wrong key, and both answer after a random pause that
// drowns the difference in their paths (the hop to the worker, about 100 µs) in milliseconds of
// noise; the pre-authentication limits (gpuserverd/server/preauth.go) bound how many samples a
// prober gets.
const (
	laneRefusalMin    = 20 * time.Millisecond
	laneRefusalJitter = 30 * time.Millisecond
)

// ErrLaneRefused is the one refusal an unauthenticated lane gets for a wrong session or key.
var ErrLaneRefused = fmt.Errorf("lane refused: wrong session or key: %w", backend.ErrNotPermitted)

// PauseLaneRefusal waits before a refused LaneHello's answer.
func PauseLaneRefusal() { time.Sleep(laneRefusalMin + mrand.N(laneRefusalJitter)) }

func (ls *lanes) attach(conn io.ReadWriteCloser, payload []byte) error {
	var h wire.LaneHello
	if err := h.Decode(payload); err != nil {
		return fmt.Errorf("lane refused: %w", err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case h.Version != wire.Version:
		return fmt.Errorf("lane refused: protocol version %d, want %d: %w", h.Version, wire.Version, backend.ErrNotSupported)
	case h.SessionID != ls.session || ls.key == nil || subtle.ConstantTimeCompare(h.Key, ls.key) != 1:
		return ErrLaneRefused
	case int(h.Lane) >= len(ls.conns):
		return fmt.Errorf("lane refused: lane %d of %d opened: %w", h.Lane, len(ls.conns), backend.ErrInvalidValue)
	case ls.conns[h.Lane] != nil:
		return fmt.Errorf("lane refused: lane %d already attached: %w", h.Lane, backend.ErrInvalidValue)
	}
	l := &lane{conn: conn, jobs: make(chan laneJob, 2*wire.MaxLanes)}
	ls.conns[h.Lane] = l
	go l.serve()
	return nil
}

func (ls *lanes) detach(conn io.ReadWriteCloser) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i, l := range ls.conns {
		if l != nil && l.conn == conn {
			close(l.jobs)
			ls.conns[i] = nil
		}
	}
}

// use returns lanes 0..n-1, all attached, for a striped copy.
func (ls *lanes) use(n uint32) ([]*lane, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if n == 0 || int(n) > len(ls.conns) {
		return nil, fmt.Errorf("%w: striped copy over %d lanes, %d opened", wire.ErrDecode, n, len(ls.conns))
	}
	for i, l := range ls.conns[:n] {
		if l == nil {
			return nil, fmt.Errorf("%w: striped copy over lane %d, which is not attached", wire.ErrDecode, i)
		}
	}
	return append([]*lane(nil), ls.conns[:n]...), nil
}

// closeAll ends every lane (a failed lane leaves the others out of step: the session ends).
func (ls *lanes) closeAll() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closeLocked()
}

func (ls *lanes) closeLocked() {
	for i, l := range ls.conns {
		if l != nil {
			l.conn.Close()
			close(l.jobs)
			ls.conns[i] = nil
		}
	}
}

// serveLaneSocket receives lane connections from the server until the socket closes.
func (s *Session) serveLaneSocket(uc *net.UnixConn) {
	buf, oob := make([]byte, wire.MaxFrame>>16), make([]byte, syscall.CmsgSpace(4))
	for {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		fd, err := oneFD(oob[:oobn])
		if err != nil {
			s.log.Warn("lane socket", "err", err)
			continue
		}
		if c, ok, err := isControl(buf[:n]); ok {
			if err != nil {
				syscall.Close(fd)
				s.log.Warn("lane socket", "err", err)
				continue
			}
			go s.control(c, fd)
			continue
		}
		conn, err := newBlockingConn(fd, frameTimeout)
		if err != nil {
			syscall.Close(fd)
			s.log.Warn("lane socket", "err", err)
			continue
		}
		if p, ok := isResume(buf[:n]); ok && s.resume != nil {
			if err := s.resume.offer(conn, append([]byte(nil), p...)); err != nil {
				s.log.Warn("resume refused", "err", err)
			} else {
				s.log.Info("guest resumed its session on a new connection")
			}
			continue
		}
		if err := s.Attach(conn, append([]byte(nil), buf[:n]...)); err != nil {
			s.log.Warn("lane", "err", err)
		}
	}
}

func oneFD(oob []byte) (int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("lane message without one control message: %v", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return -1, errors.Join(errors.New("lane message without one descriptor"), err)
	}
	return fds[0], nil
}

// openLaneSocket opens the lane socket inherited at LanesFD, if the server passed one.
func openLaneSocket() *net.UnixConn { return inheritedUnixConn(LanesFD, "lanes") }

// inheritedUnixConn is the Unix socket the server passed at fd, or nil.
func inheritedUnixConn(fd uintptr, name string) *net.UnixConn {
	f := os.NewFile(fd, name)
	if f == nil {
		return nil
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil
	}
	uc, _ := c.(*net.UnixConn)
	return uc
}

package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"gpucloud/gpuserverd/worker"
)

// A gpuserverd that starts after another (an upgrade, a crash, a SIGKILL) adopts the workers the
// earlier one left running (issue 18): their guests' connections are the workers' own, so the
// sessions go on untouched. The state file (checkpoint.go) names each live session, its worker's
// pid, claims and where its billing stands; the new server connects to the worker's adoption
// socket (worker/adopt.go), hands it fresh lane, arena and memory-ledger sockets, learns what it
// holds, and from then on meters and serves it as its own: usage goes on from the last record's
// end (no gap, nothing billed twice), the instance's memory ledger and the arena total are
// rebuilt from what the adopted workers hold, and the caps and tiers count them.

// adoptStepTimeout bounds each step of adopting one worker: it answers from memory at once.
const adoptStepTimeout = 5 * time.Second

// adoptedWorker is a worker adopted at start, to be supervised once Serve runs.
type adoptedWorker struct {
	se                  *session
	conn                *net.UnixConn
	stats               *bufio.Reader
	arenasHere, memHere *net.UnixConn
}

// adoptDir is where socket sessions' workers listen to be adopted ("" for ivshmem workers, which
// die with their server).
func (s *Server) adoptDir(ch workerChannel) string {
	if ch.kind != "" || s.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(s.cfg.DataDir, "workers")
}

// recoverSessions adopts the workers the state file names and closes the sessions whose workers
// are gone. Called by New, before anything is served.
func (s *Server) recoverSessions() error {
	if dir := s.adoptDir(workerChannel{}); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("workers' directory: %w", err)
		}
	}
	list, err := s.readOpen()
	if err != nil {
		return err
	}
	// The usage log, not the state file, says where each session's billing stands: a server
	// killed between a checkpoint's records and its rewrite of the state file left billed_to
	// behind them, and billing from there would bill that piece twice.
	lastEnd, err := s.recordedEnds()
	if err != nil {
		return err
	}
	var cut []openSession
	for _, o := range list {
		if e := lastEnd[o.SessionID]; e.After(o.BilledTo) {
			o.BilledTo = e
		}
		a, err := s.adoptWorker(o)
		if err != nil {
			s.log.Warn("cannot adopt the worker of a session an earlier gpuserverd left", "session", o.SessionID,
				"worker_pid", o.Pid, "err", err)
			cut = append(cut, o)
			continue
		}
		s.adopted = append(s.adopted, a)
		s.log.Info("adopted a running session", "session", o.SessionID, "tenant", o.TenantID,
			"worker_pid", o.Pid, "billed_to", o.BilledTo)
	}
	s.closeCut(cut)
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	return s.writeOpen()
}

// recordedEnds reads the whole usage log, page after page (a long-lived server's log holds many
// more than one page; the first page alone missed the records of the sessions still open, which
// the chaos test caught billed twice), and returns where each of this server's sessions' records
// end.
func (s *Server) recordedEnds() (map[string]time.Time, error) {
	lastEnd := map[string]time.Time{}
	for after := ""; ; {
		recs, err := s.usage.After(after)
		if err != nil {
			return nil, fmt.Errorf("reading the usage log: %w", err)
		}
		if len(recs) == 0 {
			return lastEnd, nil
		}
		for _, r := range recs {
			if r.Source == s.cfg.ServerID && r.End.After(lastEnd[r.SessionID]) {
				lastEnd[r.SessionID] = r.End
			}
		}
		after = recs[len(recs)-1].ID
	}
}

// adoptWorker connects to o's worker, hands it this server's sockets and puts its session on the
// books.
func (s *Server) adoptWorker(o openSession) (*adoptedWorker, error) {
	dir := s.adoptDir(workerChannel{})
	if o.Pid <= 0 || o.Claims == nil || dir == "" {
		return nil, errors.New("the state file's entry predates adoption")
	}
	if o.Claims.SessionID != o.SessionID || len(o.Ordinals) != len(o.Claims.GPUs) {
		return nil, errors.New("the state file's entry is inconsistent")
	}
	nc, err := net.DialTimeout("unix", worker.AdoptSocketPath(dir, o.Pid), adoptStepTimeout)
	if err != nil {
		return nil, fmt.Errorf("worker is gone: %w", err)
	}
	conn := nc.(*net.UnixConn)
	a, err := s.handOver(conn, o)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return a, nil
}

func (s *Server) handOver(conn *net.UnixConn, o openSession) (*adoptedWorker, error) {
	if pid, err := peerPid(conn); err != nil || pid != o.Pid {
		return nil, fmt.Errorf("adoption socket's peer is pid %d, not the worker %d (%v)", pid, o.Pid, err)
	}
	lanesHere, lanesThere, err := laneSocket()
	if err != nil {
		return nil, err
	}
	arenasHere, arenasThere, err := seqpacketPair("arenas")
	if err != nil {
		lanesHere.Close()
		lanesThere.Close()
		return nil, err
	}
	memHere, memThere, err := seqpacketPair("memory")
	if err != nil {
		lanesHere.Close()
		lanesThere.Close()
		arenasHere.Close()
		arenasThere.Close()
		return nil, err
	}
	closeHere := func() { lanesHere.Close(); arenasHere.Close(); memHere.Close() }
	conn.SetDeadline(time.Now().Add(adoptStepTimeout))
	_, _, err = conn.WriteMsgUnix([]byte{1}, syscall.UnixRights(int(lanesThere.Fd()), int(arenasThere.Fd()), int(memThere.Fd())), nil)
	lanesThere.Close()
	arenasThere.Close()
	memThere.Close()
	if err != nil {
		closeHere()
		return nil, fmt.Errorf("handing sockets to the worker: %w", err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	var h worker.AdoptHello
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err == nil && (h.SessionID != o.SessionID || h.Pid != o.Pid) {
		err = fmt.Errorf("worker says it is session %q pid %d", h.SessionID, h.Pid)
	}
	if err != nil {
		closeHere()
		return nil, fmt.Errorf("worker's answer: %w", err)
	}
	conn.SetDeadline(time.Time{})
	c := *o.Claims
	start, billedTo := o.Start, o.BilledTo
	if billedTo.IsZero() || billedTo.Before(start) {
		billedTo = start
	}
	se := &session{claims: c, ordinals: o.Ordinals, pid: o.Pid, start: start, billedTo: billedTo, lanes: lanesHere,
		adoptable: true, incoming: o.Incoming}
	if h.Snapshot != nil {
		se.last = *h.Snapshot
	}
	s.putOnBooks(se, h)
	return &adoptedWorker{se: se, conn: conn, stats: r, arenasHere: arenasHere, memHere: memHere}, nil
}

// putOnBooks counts an adopted session as admitted, and what its worker holds in the memory
// ledger and the arena total. Those bytes are allocated already: they are entered whatever the
// limits say (a limit lowered across the restart then refuses the next allocation, not this).
func (s *Server) putOnBooks(se *session, h worker.AdoptHello) {
	c := se.claims
	for d, n := range h.Memory {
		if d >= 0 && d < len(c.GPUs) && n > 0 && n < math.MaxInt64 {
			s.memory.change(se.pid, memKey{c.InstanceID, c.GPUs[d]}, math.MaxUint64, int64(n))
		}
	}
	s.arenas.force(se.pid, h.Arena)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countAdmitted(c)
	s.sessions[se.pid] = se
	s.metrics.adopted++
}

// superviseAdopted serves the workers adopted at start as startWorker serves its own.
func (s *Server) superviseAdopted(ctx context.Context) {
	for _, a := range s.adopted {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.release(a.se.claims)
			defer a.conn.Close()
			defer a.se.lanes.Close()
			log := s.log.With("session", a.se.claims.SessionID, "tenant", a.se.claims.TenantID,
				"tier", a.se.claims.Tier, "worker_pid", a.se.pid, "adopted", true)
			if err := s.supervise(ctx, a.se, a.stats, a.conn.Close, nil, a.arenasHere, a.memHere, log); err != nil {
				log.Error("worker", "err", err)
			}
		}()
	}
	s.adopted = nil
}

// peerPid is the pid of a Unix socket's peer.
func peerPid(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

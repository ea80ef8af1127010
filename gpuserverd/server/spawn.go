package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// session is a running worker.
type session struct {
	claims   sessiontoken.Claims
	ordinals []int
	pid      int
	start    time.Time

	// billedTo is where the last checkpoint record ended: the next record starts here. Guarded
	// by s.ckptMu so a checkpoint and the session's end never bill the same interval twice.
	billedTo time.Time

	mu   sync.Mutex
	last worker.Snapshot

	lanes *net.UnixConn // lane connections go to the worker on this socket

	// adoptable: the worker outlives this server and a next one may adopt it (a socket
	// session's). detached: this server stopped with Config.KeepSessionsOnStop and left it.
	adoptable bool
	detached  atomic.Bool

	// incoming: a restored session (a migration's target, a checkpoint's restore), billed only
	// from the time its worker reports (Snapshot.BillFrom). migrating: a migration away is under
	// way; checkpoints leave it unbilled until it ends, billed then up to its hand-off.
	incoming  bool
	migrating atomic.Bool

	update chan struct{} // closed at the next snapshot (guarded by mu)
	ended  chan struct{} // closed when the worker has ended
}

// runWorker hands conn to a new worker process and waits for it; the usage record is written
// whether the worker ends cleanly or is killed.
func (s *Server) runWorker(ctx context.Context, conn net.Conn, c sessiontoken.Claims, ordinals []int, log *slog.Logger) error {
	return s.runWorkerOf(ctx, conn, c, ordinals, workerChannel{}, log)
}

// runWorkerOf is runWorker with the worker's channel said (a restored session's).
func (s *Server) runWorkerOf(ctx context.Context, conn net.Conn, c sessiontoken.Claims, ordinals []int, channel workerChannel, log *slog.Logger) error {
	fc, ok := conn.(interface{ File() (*os.File, error) })
	if !ok {
		return fmt.Errorf("connection is %T, not a socket", conn)
	}
	connFile, err := fc.File() // a duplicate the child inherits
	if err != nil {
		return fmt.Errorf("connection fd: %w", err)
	}
	defer connFile.Close()
	return s.startWorker(ctx, connFile, conn.Close, channel, c, ordinals, log)
}

// workerChannel says what a worker's fd 3 is: a socket (kind ""), or slot slot of count of a
// VM's ivshmem channel file (kind "ivshmem"). restore, when set, is a restored session's source
// (worker.Config.Restore): fd 3 is a migrating server's connection or a checkpoint's file.
type workerChannel struct {
	kind        string
	slot, count int
	restore     string
}

// startWorker runs a worker on connFile (a socket, or with channel "ivshmem" a VM's channel
// file); release is called once the worker holds its own copy.
func (s *Server) startWorker(ctx context.Context, connFile *os.File, release func() error, channel workerChannel,
	c sessiontoken.Claims, ordinals []int, log *slog.Logger) error {
	statsR, statsW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stats pipe: %w", err)
	}
	defer statsR.Close()
	cfg, _ := json.Marshal(worker.Config{
		Backend: s.cfg.BackendKind, SessionID: c.SessionID, TenantID: c.TenantID,
		Tier: c.Tier, MemoryQuota: c.MemoryQuota, Devices: ordinals, ShmMax: s.cfg.ShmSessionMax,
		Channel: channel.kind, Slot: channel.slot, Slots: channel.count, PeerTimeout: s.cfg.IvshmemPeerTimeout,
		AdoptDir: s.adoptDir(channel), AdoptTimeout: s.cfg.AdoptTimeout, Restore: channel.restore,
	})
	lanesHere, lanesThere, err := laneSocket()
	if err != nil {
		statsW.Close()
		return err
	}
	defer lanesHere.Close()
	arenasHere, arenasThere, err := seqpacketPair("arenas")
	if err != nil {
		statsW.Close()
		lanesThere.Close()
		return err
	}
	defer arenasHere.Close()
	memHere, memThere, err := seqpacketPair("memory")
	if err != nil {
		statsW.Close()
		lanesThere.Close()
		arenasThere.Close()
		return err
	}
	defer memHere.Close()
	ncclHere, ncclThere, err := seqpacketPair("nccl")
	if err != nil {
		statsW.Close()
		lanesThere.Close()
		arenasThere.Close()
		memThere.Close()
		return err
	}
	ipcHere, ipcThere, err := seqpacketPair("ipc")
	if err != nil {
		statsW.Close()
		lanesThere.Close()
		arenasThere.Close()
		memThere.Close()
		ncclHere.Close()
		ncclThere.Close()
		return err
	}
	cmd := exec.Command(s.cfg.WorkerCommand[0], s.cfg.WorkerCommand[1:]...)
	cmd.Stdin = bytes.NewReader(cfg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{connFile, statsW, lanesThere, arenasThere, memThere, ncclThere, ipcThere} // fds 3-9 (worker.LanesFD, ArenaFD, MemoryFD, NcclFD, IpcFD)
	// A socket session's worker outlives gpuserverd (its own session, so neither the server's
	// death nor a signal to the server's process group reaches it) and waits for a new server to
	// adopt it (adopt.go); one that nobody adopts ends itself. An ivshmem worker cannot be
	// adopted (a new server serves the channel's slots afresh) and dies with the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if channel.kind != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	childEnds := []*os.File{statsW, lanesThere, arenasThere, memThere, ncclThere, ipcThere}
	err = cmd.Start()
	for _, f := range childEnds {
		f.Close() // the child has its own copies
	}
	if err != nil {
		ncclHere.Close()
		ipcHere.Close()
		return fmt.Errorf("starting worker: %w", err)
	}
	// The worker's NCCL ids (ncclids.go) live as long as it does: not an adoptable part of the
	// session, so served here rather than by supervise.
	go func() {
		defer ncclHere.Close()
		s.serveNccl(ncclHere, c, log)
	}()
	go func() { // the worker's exported objects (ipc.go), likewise
		defer ipcHere.Close()
		s.serveIpc(ipcHere, cmd.Process.Pid, c, log)
	}()
	release() // the worker owns the connection now

	now := time.Now()
	se := &session{claims: c, ordinals: ordinals, pid: cmd.Process.Pid, start: now, billedTo: now, lanes: lanesHere,
		adoptable: channel.kind == "", incoming: channel.restore != "", ended: make(chan struct{})}
	s.mu.Lock()
	s.sessions[se.pid] = se
	s.mu.Unlock()
	log = log.With("session", c.SessionID, "tenant", c.TenantID, "tier", c.Tier, "worker_pid", se.pid)
	log.Info("session started")
	// A revocation that arrived between the Hello's check and now swept s.sessions without us.
	if s.denied.revoked(c) {
		log.Info("ending a session whose instance was stopped or deleted during its handshake")
		cmd.Process.Kill()
	}
	s.noteOpen(se) // after the check: the state file's fsync must not widen its window
	return s.supervise(ctx, se, statsR, statsR.Close, cmd.Wait, arenasHere, memHere, log)
}

// noteOpen writes a started session into the state file, so a server that follows this one can
// adopt its worker.
func (s *Server) noteOpen(se *session) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.writeOpen(); err != nil {
		s.log.Error("noting a session in the state file", "session", se.claims.SessionID, "err", err)
	}
}

// supervise serves a running worker's server sockets and reads its stats until it ends (stats
// closes), then bills the session's last interval. wait, when not nil, reaps the worker process.
// When ctx ends the worker is told to stop, or, with Config.KeepSessionsOnStop, left running for
// the next server to adopt (closeStats ends the reading).
func (s *Server) supervise(ctx context.Context, se *session, stats io.Reader, closeStats func() error, wait func() error,
	arenasHere, memHere *net.UnixConn, log *slog.Logger) error {
	if se.ended == nil {
		se.ended = make(chan struct{})
	}
	defer close(se.ended)
	arenasDone, memDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(arenasDone)
		s.serveArenas(arenasHere, se.pid, log)
	}()
	go func() {
		defer close(memDone)
		s.serveMemory(memHere, se.pid, se.claims, log)
	}()

	stop := context.AfterFunc(ctx, func() {
		if s.cfg.KeepSessionsOnStop && se.adoptable {
			se.detached.Store(true)
			closeStats()
			return
		}
		syscall.Kill(se.pid, syscall.SIGTERM)
	})
	defer stop()
	sc := bufio.NewScanner(stats)
	for sc.Scan() {
		var snap worker.Snapshot
		if json.Unmarshal(sc.Bytes(), &snap) == nil {
			se.mu.Lock()
			// Reports may arrive out of order (each writer takes its snapshot, then its turn
			// on the stream): an older one never replaces a newer.
			if snap.At.IsZero() || !snap.At.Before(se.last.At) {
				se.last = snap
			}
			se.mu.Unlock()
			se.changed()
		}
	}
	if se.detached.Load() {
		// The session goes on in its worker; it stays in the state file, billed to its last
		// record, for the next server to adopt and bill on.
		arenasHere.Close()
		memHere.Close()
		<-arenasDone
		<-memDone
		log.Info("leaving the session running for the next gpuserverd")
		return nil
	}
	var werr error
	if wait != nil {
		werr = wait()
	}
	end := time.Now()
	// However the worker ended, its arena is gone with it; a request it sent just before dying
	// is answered (or not) before its bytes are dropped, so none stay held.
	arenasHere.Close()
	memHere.Close()
	<-arenasDone
	<-memDone
	s.arenas.drop(se.pid)
	s.memory.drop(se.pid)
	s.mu.Lock()
	delete(s.sessions, se.pid)
	s.metrics.ended++
	s.mu.Unlock()
	log.Info("session ended", "worker_exit", werr, "seconds", end.Sub(se.start).Seconds())
	if err := s.endUsage(se, end); err != nil {
		s.mu.Lock()
		s.metrics.usageErrors++
		s.mu.Unlock()
		return err
	}
	if dir := s.adoptDir(workerChannel{}); dir != "" && se.adoptable {
		os.Remove(worker.EndedFile(dir, se.pid)) // billed here: no later server needs it
	}
	return nil
}

// endUsage writes the ended session's last usage record and drops it from the open list; se is
// already out of s.sessions.
func (s *Server) endUsage(se *session, end time.Time) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if end.After(se.billedTo) { // a checkpoint racing the end may already have billed through it
		if err := s.record(se, end); err != nil {
			return err
		}
	}
	return s.forgetOpen(se)
}

// record writes the session's usage record for [se.billedTo, end] and moves billedTo to end.
// The caller holds s.ckptMu.
func (s *Server) record(se *session, end time.Time) error {
	se.mu.Lock()
	snap := se.last
	se.mu.Unlock()
	c := se.claims
	from := se.billedTo
	if from.IsZero() {
		from = se.start
	}
	// A moved session is billed by each server for its own part: the old one up to the
	// hand-off, the new one from it, so the two records meet without a gap or an overlap.
	if se.incoming {
		if snap.BillFrom.IsZero() {
			return nil // not live here yet
		}
		from = later(from, snap.BillFrom)
	}
	// Nor past what the worker's reports allow: its hand-off, a move's pause, its guest's absence.
	end = snap.BillableUntil(end)
	// Billing counts whole milliseconds, so records are cut on millisecond boundaries: a piece
	// shorter than that has nothing to bill (and billing would refuse it as empty); it stays
	// unbilled and joins the next record, which starts where the last one ended.
	from, end = from.Truncate(time.Millisecond), end.Truncate(time.Millisecond)
	if !end.After(from) {
		return nil
	}
	model := ""
	for _, d := range s.devices {
		if len(c.GPUs) > 0 && d.UUID == c.GPUs[0] {
			model = d.Name
		}
	}
	_, err := s.usage.Append(func(seq int) api.UsageRecord {
		return api.UsageRecord{
			ID: fmt.Sprintf("%s/%s/%d", s.cfg.ServerID, c.SessionID, seq), Kind: api.UsageGPU,
			Source: s.cfg.ServerID, TenantID: c.TenantID, InstanceID: c.InstanceID, SessionID: c.SessionID,
			Start: from.UTC(), End: end.UTC(), GPUModel: model, Tier: c.Tier, GPUCount: len(c.GPUs),
			MemoryQuota: c.MemoryQuota, MemoryPeakBytes: snap.MemoryPeakBytes,
			MemoryAvgBytes: snap.MemoryAvgBytes, BytesMoved: snap.BytesMoved,
		}
	})
	if err == nil {
		se.billedTo = end
	}
	return err
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

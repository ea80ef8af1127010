package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// Session mobility on the server (issue 18; docs/gpuserverd/sessions.md, "Checkpoint, restore
// and live migration"): the admin API asks a session's worker for a checkpoint or a migration
// (worker.Control, on its lane socket), and a server takes a migrating session in on its data
// port (MigrateIn) or a checkpoint's image from a file, into a worker that restores it.

// controlSeq numbers control requests, so a waiter knows its outcome among a worker's snapshots.
var controlSeq atomic.Int64

// controlTimeout bounds how long an admin request waits for its worker's outcome.
const controlTimeout = 10 * time.Minute

// ErrNoSession is an admin request naming a session this server does not run.
var ErrNoSession = errors.New("no such session on this server")

// changed wakes whoever waits for the session's next snapshot.
func (se *session) changed() {
	se.mu.Lock()
	if se.update != nil {
		close(se.update)
	}
	se.update = make(chan struct{})
	se.mu.Unlock()
}

// lastAndWake is the worker's last snapshot and a channel closed when the next one comes.
func (se *session) lastAndWake() (worker.Snapshot, <-chan struct{}) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.update == nil {
		se.update = make(chan struct{})
	}
	return se.last, se.update
}

// waitControl waits until the worker reports the outcome of control request id, or ctx ends.
func (se *session) waitControl(ctx context.Context, id int64, ended <-chan struct{}) (worker.Snapshot, error) {
	for {
		snap, wake := se.lastAndWake()
		if snap.Control != nil && snap.Control.ID == id {
			if c := snap.Control; c.NotMovable {
				return snap, fmt.Errorf("%w: %s", worker.ErrNotMovable, strings.TrimPrefix(c.Error, worker.ErrNotMovable.Error()+": "))
			} else if c.Error != "" {
				return snap, errors.New(c.Error)
			}
			return snap, nil
		}
		select {
		case <-wake:
		case <-ended:
			// The worker's last snapshot may have come in with its end (a migrated session's
			// guest leaves at once): it may hold the outcome, or at least the hand-off.
			se.mu.Lock()
			snap = se.last
			se.mu.Unlock()
			if snap.Control != nil && snap.Control.ID == id && snap.Control.Error == "" {
				return snap, nil
			}
			return snap, errors.New("the session ended before its worker answered")
		case <-ctx.Done():
			return snap, ctx.Err()
		}
	}
}

// sessionByID is the running (not incoming-and-unrestored) session sid.
func (s *Server) sessionByID(sid string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.sessions {
		if se.claims.SessionID == sid && se.lanes != nil && !se.handedOff() {
			return se, nil
		}
	}
	return nil, fmt.Errorf("session %q: %w", sid, ErrNoSession)
}

func (se *session) handedOff() bool {
	se.mu.Lock()
	defer se.mu.Unlock()
	return !se.last.HandedOff.IsZero()
}

// passFD sends fd and payload on the worker's lane socket.
func passFD(uc *net.UnixConn, fd uintptr, payload []byte) error {
	if _, _, err := uc.WriteMsgUnix(payload, syscall.UnixRights(int(fd)), nil); err != nil {
		return fmt.Errorf("passing to the worker: %w", err)
	}
	return nil
}

// CheckpointResult is what a checkpoint wrote.
type CheckpointResult struct {
	SessionID string  `json:"session_id"`
	Path      string  `json:"path"`
	Bytes     int64   `json:"bytes"`
	Ms        float64 `json:"ms"`
}

// CheckpointSession has session sid's worker write its image to a file under the data dir; the
// session goes on.
// With stop the session ends here once its image is written: it is parked for a restore
// (RestoreSession), and its guest's resumes are held off until then (parkedWait).
func (s *Server) CheckpointSession(ctx context.Context, sid string, stop bool) (CheckpointResult, error) {
	se, err := s.sessionByID(sid)
	if err != nil {
		return CheckpointResult{}, err
	}
	if stop {
		if !se.migrating.CompareAndSwap(false, true) {
			return CheckpointResult{}, fmt.Errorf("checkpoint: session %s is moving", sid)
		}
		s.park(sid) // before the worker stops: the guest's first resume must find it parked
	}
	dir := filepath.Join(s.cfg.DataDir, "checkpoints")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return CheckpointResult{}, fmt.Errorf("checkpoints' directory: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%x-%d.img", []byte(sid), time.Now().UnixNano()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("checkpoint file: %w", err)
	}
	id := controlSeq.Add(1)
	err = passFD(se.lanes, f.Fd(), worker.ControlPayload(worker.Control{ID: id, Op: "checkpoint", Stop: stop}))
	f.Close()
	var snap worker.Snapshot
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, controlTimeout)
		defer cancel()
		snap, err = se.waitControl(ctx, id, se.ended)
	}
	if err != nil {
		os.Remove(path)
		if stop && snap.HandedOff.IsZero() {
			se.migrating.Store(false)
			s.unpark(sid)
		}
		return CheckpointResult{}, fmt.Errorf("checkpoint of session %s: %w", sid, err)
	}
	fi, _ := os.Stat(path)
	return CheckpointResult{SessionID: sid, Path: path, Bytes: fi.Size(), Ms: snap.Control.Ms}, nil
}

// MigrateRequest asks to move a session to another server.
type MigrateRequest struct {
	// Target is the other server's data address (host:port), and GuestAddress where the guest
	// reaches it ("": Target).
	Target       string `json:"target"`
	GuestAddress string `json:"guest_address,omitempty"`
	// Token is a session token for the target server (its audience, its GPUs), the session's id,
	// issued by the control plane that placed the session there.
	Token string `json:"token"`
	// Copy is how the memory goes: "" hands it over where the target serves the same GPU on this
	// host and copies it through the connection elsewhere; "stream" always copies.
	Copy string `json:"copy,omitempty"`
}

// MigrateSession moves session sid to the server at req.Target; it returns the migration's
// progress once the session has moved or failed to (the session then runs on here).
func (s *Server) MigrateSession(ctx context.Context, sid string, req MigrateRequest) (*worker.MigrationProgress, error) {
	switch {
	case req.Target == "":
		return nil, errors.New("migrate: target: want the other server's host:port")
	case req.Token == "":
		return nil, errors.New("migrate: token: want a session token for the target server")
	case req.Copy != "" && req.Copy != "stream":
		return nil, fmt.Errorf("migrate: copy %q: want \"stream\" or nothing", req.Copy)
	}
	if _, _, err := net.SplitHostPort(req.Target); err != nil {
		return nil, fmt.Errorf("migrate: target %q: %w", req.Target, err)
	}
	if req.GuestAddress == "" {
		req.GuestAddress = req.Target
	}
	se, err := s.sessionByID(sid)
	if err != nil {
		return nil, err
	}
	if !se.migrating.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("migrate: session %s: %w: it is already moving", sid, worker.ErrNotMovable)
	}
	if p, moved, err := se.moveUnderWay(ctx, req.GuestAddress); err != nil || moved {
		if !moved {
			se.migrating.Store(false)
		}
		return p, err
	}
	conn, err := dialMigrateIn(ctx, req.Target, req.Token, sid)
	if err != nil {
		se.migrating.Store(false)
		return nil, err
	}
	id := controlSeq.Add(1)
	f, err := conn.(*net.TCPConn).File()
	conn.Close()
	if err == nil {
		err = passFD(se.lanes, f.Fd(), worker.ControlPayload(worker.Control{ID: id, Op: "migrate", Address: req.GuestAddress, Stream: req.Copy == "stream"}))
		f.Close()
	}
	var snap worker.Snapshot
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, controlTimeout)
		defer cancel()
		snap, err = se.waitControl(ctx, id, se.ended)
	}
	if err != nil && !snap.HandedOff.IsZero() {
		// The session was handed to the target (its worker said so) and ended here before the
		// control's answer was read: it moved.
		s.log.Info("session migrated; its worker ended before answering", "session", sid, "target", req.Target)
		return snap.Migration, nil
	}
	if err != nil {
		switch {
		case !snap.HandedOff.IsZero():
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			// The request stopped waiting, not the worker: it may still hand the session off, so
			// checkpoints leave it unbilled until the worker answers (or the session ends, billed
			// up to its hand-off); billing it again at once could bill time past the hand-off
			// that the new server bills too.
			go func() {
				if snap, err := se.waitControl(context.Background(), id, se.ended); err != nil && snap.HandedOff.IsZero() {
					se.migrating.Store(false)
				}
			}()
		default:
			se.migrating.Store(false) // it runs on here: checkpoints bill it again
		}
		return snap.Migration, fmt.Errorf("migrate session %s to %s: %w", sid, req.Target, err)
	}
	s.log.Info("session migrated", "session", sid, "target", req.Target, "pause_ms", snap.Migration.PauseMs)
	return snap.Migration, nil
}

// moveUnderWay waits for a move the worker already runs (asked for by a gpuserverd killed
// mid-move, whose worker this one adopted) to end: moved when it handed the session to address,
// an error naming it when it goes elsewhere; neither when none runs (any more), so the caller
// asks for its own.
func (se *session) moveUnderWay(ctx context.Context, address string) (*worker.MigrationProgress, bool, error) {
	for {
		snap, wake := se.lastAndWake()
		p := snap.Migration
		switch {
		case !snap.HandedOff.IsZero() && p != nil && p.Target == address:
			return p, true, nil
		case !p.UnderWay():
			return nil, false, nil
		case p.Target != address:
			return p, false, fmt.Errorf("migrate: %w: a move to %s is already under way", worker.ErrNotMovable, p.Target)
		}
		select {
		case <-wake:
		case <-se.ended:
			return p, false, errors.New("migrate: the session ended during the move already under way")
		case <-ctx.Done():
			return p, false, fmt.Errorf("migrate: waiting for the move already under way: %w", ctx.Err())
		}
	}
}

// dialMigrateIn opens a migration to target: MigrateIn, answered by MigrateInReply.
func dialMigrateIn(ctx context.Context, target, token, sid string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, fmt.Errorf("migrate: dialling %s: %w", target, err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	m := &wire.MigrateIn{Version: wire.Version, Token: token, SessionID: sid}
	if _, err := conn.Write(wire.AppendFrame(nil, m, 0, 0)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrate: %s: %w", target, err)
	}
	h, p, err := wire.ReadFrame(conn, nil)
	var r wire.MigrateInReply
	if err == nil && h.Type != wire.TypeMigrateInReply {
		err = fmt.Errorf("answered %s", h.Type)
	}
	if err == nil {
		err = r.Decode(p)
	}
	if err == nil && r.Result != 0 {
		err = fmt.Errorf("refused: %s", r.Message)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("migrate: %s: %w", target, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// acceptMigration takes in a session another server moves here: the token is checked and the
// session admitted as a Hello's would be, then a worker restores it from the connection.
func (s *Server) acceptMigration(ctx context.Context, conn net.Conn, p []byte, log *slog.Logger, authenticated func()) {
	c, ordinals, err := s.migrateIn(p)
	if err != nil {
		var r *refusal
		code, msg := backend.ErrInvalidValue, err.Error()
		if errors.As(err, &r) {
			s.count(r.reason)
			code, msg = r.code, r.msg
		}
		log.Warn("migration refused", "err", msg)
		conn.Write(wire.AppendFrame(nil, &wire.MigrateInReply{Result: int32(code), Message: truncate(msg, 1024)}, 0, 0))
		return
	}
	authenticated()
	conn.SetDeadline(time.Time{})
	defer s.release(c)
	if _, err := conn.Write(wire.AppendFrame(nil, &wire.MigrateInReply{}, 0, 0)); err != nil {
		return
	}
	s.count("")
	log.Info("taking in a migrating session", "session", c.SessionID)
	if err := s.moves.cameBack(c.InstanceID); err != nil {
		log.Error("forgetting the instance's earlier move off this server", "instance", c.InstanceID, "err", err)
	}
	if err := s.runWorkerOf(ctx, conn, c, ordinals, workerChannel{restore: "migrate"}, log); err != nil {
		log.Error("worker", "session", c.SessionID, "err", err)
	}
}

// migrateIn checks a MigrateIn and admits its session.
func (s *Server) migrateIn(p []byte) (sessiontoken.Claims, []int, error) {
	var m wire.MigrateIn
	var c sessiontoken.Claims
	if err := m.Decode(p); err != nil {
		return c, nil, &refusal{backend.ErrInvalidValue, "protocol", err.Error()}
	}
	if m.Version != wire.Version {
		return c, nil, &refusal{backend.ErrNotSupported, "version", fmt.Sprintf("protocol version %d not supported", m.Version)}
	}
	c, reason, err := s.checkToken(m.Token)
	if err != nil {
		return c, nil, &refusal{backend.ErrNotPermitted, reason, err.Error()}
	}
	if c.SessionID != m.SessionID {
		return c, nil, &refusal{backend.ErrNotPermitted, "token",
			fmt.Sprintf("the token is for session %q, the migration moves %q", c.SessionID, m.SessionID)}
	}
	// Sessions may share an id (an instance's processes); a guest's resume finds its own by key.
	ordinals, err := s.ordinals(c.GPUs)
	if err != nil {
		return c, nil, err
	}
	return c, ordinals, s.admit(c)
}

// RestoreRequest restores a checkpoint's image on this server.
type RestoreRequest struct {
	Path  string `json:"path"`  // a checkpoint under this server's data dir
	Token string `json:"token"` // a session token for this server, the image's session
}

// RestoreSession starts a worker from a checkpoint's image; the guest resumes on it with the
// secret it holds. It returns once the worker runs (its restore's outcome is in its snapshot).
func (s *Server) RestoreSession(req RestoreRequest) error {
	dir, _ := filepath.Abs(filepath.Join(s.cfg.DataDir, "checkpoints"))
	path, err := filepath.Abs(req.Path)
	if err != nil || filepath.Dir(path) != dir {
		return fmt.Errorf("restore: path %q: want a checkpoint in %s", req.Path, dir)
	}
	c, reason, err := s.checkToken(req.Token)
	if err != nil {
		return fmt.Errorf("restore: token (%s): %w", reason, err)
	}
	if _, err := s.sessionByID(c.SessionID); err == nil {
		return fmt.Errorf("restore: session %q already runs here", c.SessionID)
	}
	ordinals, err := s.ordinals(c.GPUs)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := s.admit(c); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		s.release(c)
		return fmt.Errorf("restore: %w", err)
	}
	defer s.unpark(c.SessionID) // the restored worker answers its guest's resumes from now on
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.release(c)
		log := s.log.With("restore", path)
		if err := s.startWorker(s.serveCtx, f, f.Close, workerChannel{restore: "file"}, c, ordinals, log); err != nil {
			log.Error("worker", "session", c.SessionID, "err", err)
		}
		f.Close()
	}()
	return nil
}

// parkTimeout is how long a session stopped by a checkpoint stays parked: past a guest's
// longest resume window (worker.MaxResumeWindow) nothing is waiting for it.
const parkTimeout = worker.MaxResumeWindow

// park notes that session sid stopped for a restore: a Resume for it, while no worker runs it,
// is held off (closed without an answer, so the guest tries again) instead of refused.
func (s *Server) park(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parked == nil {
		s.parked = map[string]time.Time{}
	}
	s.parked[sid] = time.Now().Add(parkTimeout)
}

func (s *Server) unpark(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parked, sid)
}

// parkedWait says whether session sid is parked for a restore. Caller holds s.mu.
func (s *Server) parkedWait(sid string) bool {
	until, ok := s.parked[sid]
	if ok && time.Now().After(until) {
		delete(s.parked, sid)
		return false
	}
	return ok
}

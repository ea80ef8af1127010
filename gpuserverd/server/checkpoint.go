package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// openFile is the state file of live sessions: every running session with what a server that
// follows this one needs to adopt its worker (adopt.go) and to go on billing it from where the
// last record ended. A session whose worker cannot be adopted is closed at its last record.
const openFile = "sessions.open"

// openSession is one entry of openFile.
type openSession struct {
	SessionID  string    `json:"session_id"`
	TenantID   string    `json:"tenant_id"`
	InstanceID string    `json:"instance_id"`
	BilledTo   time.Time `json:"billed_to"`
	// For adoption: the worker's pid, the token's claims, the GPUs' ordinals and when the
	// session began. Entries written before adoption existed lack them and are closed.
	Pid      int                  `json:"pid,omitempty"`
	Claims   *sessiontoken.Claims `json:"claims,omitempty"`
	Ordinals []int                `json:"ordinals,omitempty"`
	Start    time.Time            `json:"start,omitzero"`
	// Incoming: a restored session (a migration's target, a checkpoint's restore), billed only
	// from the time its worker reports; a server that adopts it keeps that rule.
	Incoming bool `json:"incoming,omitempty"`
}

// RunCheckpoints bills every open session's time since its last record every period until ctx
// ends, so a gpuserverd killed mid-session loses at most one period of each session's usage
// instead of the whole session.
func (s *Server) RunCheckpoints(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := s.Checkpoint(now); err != nil {
				s.log.Error("checkpointing sessions' usage", "err", err)
			}
		}
	}
}

// Checkpoint appends, for each open session, a usage record covering [its last record's end,
// now], then notes the open sessions in openFile.
func (s *Server) Checkpoint(now time.Time) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.mu.Lock()
	open := make([]*session, 0, len(s.sessions))
	for _, se := range s.sessions {
		open = append(open, se)
	}
	s.mu.Unlock()
	var errs []error
	for _, se := range open {
		if !now.After(se.billedTo) || se.migrating.Load() {
			continue // a migrating session is billed when it ends, up to its hand-off
		}
		// A session whose worker is moving it is billed only as far as the worker has
		// reported: it may have paused (and the target begun billing) since its last report
		// read here. Others are billed to now, as the reports come once a second.
		se.mu.Lock()
		upTo, p := se.last.At, se.last.Migration
		se.mu.Unlock()
		if !p.UnderWay() || upTo.IsZero() || upTo.After(now) {
			upTo = now
		}
		if err := s.record(se, upTo); err != nil {
			s.mu.Lock()
			s.metrics.usageErrors++
			s.mu.Unlock()
			errs = append(errs, fmt.Errorf("session %s: %w", se.claims.SessionID, err))
		}
	}
	if err := s.writeOpen(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// forgetOpen drops an ended session from openFile; the caller holds s.ckptMu and has removed se
// from s.sessions.
func (s *Server) forgetOpen(*session) error { return s.writeOpen() }

// writeOpen rewrites openFile from the sessions running now, whole (replaceFile): a crash leaves
// the old list or the new, never half. The caller holds s.ckptMu.
func (s *Server) writeOpen() error {
	s.mu.Lock()
	list := []openSession{}
	for _, se := range s.sessions {
		c := se.claims
		list = append(list, openSession{SessionID: c.SessionID, TenantID: c.TenantID,
			InstanceID: c.InstanceID, BilledTo: se.billedTo.UTC(), Pid: se.pid, Claims: &c,
			Ordinals: se.ordinals, Start: se.start.UTC(), Incoming: se.incoming})
	}
	s.mu.Unlock()
	b, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("open sessions: %w", err)
	}
	if err := replaceFile(filepath.Join(s.cfg.DataDir, openFile), b); err != nil {
		return fmt.Errorf("open sessions: %w", err)
	}
	return nil
}

// readOpen reads the state file an earlier gpuserverd left; nil when there is none or it is
// unreadable (the file is only ever replaced whole; a bad one is not ours to guess at: it is kept
// for a person, and the records it would describe are already in the usage log).
func (s *Server) readOpen() ([]openSession, error) {
	path := filepath.Join(s.cfg.DataDir, openFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open sessions: %w", err)
	}
	var list []openSession
	if err := json.Unmarshal(b, &list); err != nil {
		s.log.Error("open sessions file is unreadable; leaving it", "path", path, "err", err)
		return nil, nil
	}
	return list, nil
}

// closeCut closes sessions an earlier gpuserverd left open whose workers are gone: each is over.
// A worker whose session ended while no server was attached left its end time
// (worker.EndedFile): the session is billed to it. Otherwise its usage is billed up to its last
// record, and the time after that (at most one checkpoint period) is lost.
func (s *Server) closeCut(list []openSession) {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	for _, o := range list {
		if end, from, ok := s.recordedEnd(o); ok {
			se := &session{claims: *o.Claims, start: o.Start, billedTo: o.BilledTo, incoming: o.Incoming}
			se.last.BillFrom = from
			if err := s.record(se, end); err != nil {
				s.log.Error("billing a session that ended while no gpuserverd ran", "session", o.SessionID, "err", err)
			} else {
				s.log.Info("closed a session that ended while no gpuserverd ran, billed to its end",
					"session", o.SessionID, "tenant", o.TenantID, "instance", o.InstanceID, "end", end)
				continue
			}
		}
		s.log.Warn("closing a session cut by a gpuserverd stop; usage after its last checkpoint is lost",
			"session", o.SessionID, "tenant", o.TenantID, "instance", o.InstanceID, "billed_to", o.BilledTo)
	}
	s.metrics.cut += uint64(len(list))
}

// recordedEnd reads (and removes) the end time o's worker left, and for a restored session the
// time it is billed from; the end is held between o's last record and now, so a bad file can
// neither bill backwards nor into the future. A restored session's file without a valid second
// line is refused: billing it from its worker's start would bill the old server's time again.
func (s *Server) recordedEnd(o openSession) (end, from time.Time, ok bool) {
	dir := s.adoptDir(workerChannel{})
	if dir == "" || o.Pid <= 0 || o.Claims == nil {
		return end, from, false
	}
	path := worker.EndedFile(dir, o.Pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return end, from, false
	}
	os.Remove(path)
	endText, fromText, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	end, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(endText))
	if err != nil || !end.After(o.BilledTo) {
		return time.Time{}, from, false
	}
	if o.Incoming {
		if from, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(fromText)); err != nil {
			return time.Time{}, time.Time{}, false
		}
	}
	if now := time.Now(); end.After(now) {
		end = now
	}
	return end, from, true
}

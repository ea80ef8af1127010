package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gpucloud/api"
)

// A drain that moves work (issue 18; docs/gpuserverd/sessions.md): the apiserver hands this
// server, as the source, its open moves in the heartbeat's answer (api.GPUServerAck.Moves), each
// with a session token minted for the target. Every session of the move's instance is migrated
// (MigrateSession) and the move's progress and outcome go back in the next heartbeats
// (api.GPUServerReport.Moves) until an answer no longer names the move. A move the apiserver hands
// again while it runs is not started twice; after a restart of this server an open move is
// started again, and moves only the sessions still here.

// maxSessionsPerMove bounds the migrations of one move (an instance's processes share its id).
const maxSessionsPerMove = 4096

// moveBook is this server's drain moves, by move id.
type moveBook struct {
	mu    sync.Mutex
	moves map[string]*api.MoveReport
	kick  chan struct{} // a move changed state: report it now
	// away and following: late sessions of moved instances (follow.go); away is kept in
	// awayPath ("": in memory only).
	away      map[string]awayMove
	awayPath  string
	following map[string]bool
}

func (b *moveBook) init() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.moves == nil {
		b.moves = map[string]*api.MoveReport{}
		b.kick = make(chan struct{}, 1)
	}
}

// reports is what the next heartbeat says of the moves.
func (b *moveBook) reports() []api.MoveReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []api.MoveReport
	for _, r := range b.moves {
		out = append(out, *r)
	}
	return out
}

func (b *moveBook) set(r api.MoveReport) {
	b.mu.Lock()
	*b.moves[r.MoveID] = r
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// settle forgets the finished moves the apiserver took (it had their outcome in sent and no
// longer names them) and returns the moves it hands out that are new here.
func (b *moveBook) settle(sent []api.MoveReport, open []api.GPUServerMove) []api.GPUServerMove {
	b.mu.Lock()
	defer b.mu.Unlock()
	named := map[string]bool{}
	var fresh []api.GPUServerMove
	for _, m := range open {
		named[m.MoveID] = true
		if _, ok := b.moves[m.MoveID]; !ok {
			b.moves[m.MoveID] = &api.MoveReport{MoveID: m.MoveID, State: api.MoveMoving}
			fresh = append(fresh, m)
		}
	}
	for _, r := range sent {
		if r.State != api.MoveMoving && !named[r.MoveID] {
			delete(b.moves, r.MoveID)
		}
	}
	return fresh
}

// startMoves starts the moves the apiserver handed out that do not run here yet.
func (s *Server) startMoves(ctx context.Context, sent []api.MoveReport, open []api.GPUServerMove) {
	for _, m := range s.moves.settle(sent, open) {
		s.log.Info("drain: moving an instance's sessions", "move", m.MoveID, "instance", m.InstanceID, "target", m.Target)
		if err := s.moves.noteAway(m, time.Now()); err != nil {
			s.log.Warn("drain: the move's late sessions will not follow it after a restart", "move", m.MoveID, "err", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r := s.runMove(ctx, m)
			if r.State == api.MoveFailed {
				s.log.Warn("drain: move failed", "move", m.MoveID, "instance", m.InstanceID, "reason", r.Reason)
			} else {
				s.log.Info("drain: move done", "move", m.MoveID, "instance", m.InstanceID, "sessions", r.SessionsMoved)
			}
			s.moves.set(r)
		}()
	}
}

// runMove migrates every session of the move's instance to its target and returns the outcome.
func (s *Server) runMove(ctx context.Context, m api.GPUServerMove) api.MoveReport {
	r := api.MoveReport{MoveID: m.MoveID, State: api.MoveMoving}
	req := MigrateRequest{Target: m.Target, Token: m.Token.Token}
	for range maxSessionsPerMove {
		if _, err := s.sessionByID(m.InstanceID); errors.Is(err, ErrNoSession) {
			break
		}
		p, err := s.MigrateSession(ctx, m.InstanceID, req)
		if p != nil {
			r.BytesCopied += p.CopiedBytes
			r.BytesTotal += p.TotalBytes
			r.PauseMs = max(r.PauseMs, p.PauseMs)
		}
		if err != nil {
			r.State, r.Reason = api.MoveFailed, truncate(fmt.Sprintf("%d session(s) moved, then: %v", r.SessionsMoved, err), 1024)
			return r
		}
		r.SessionsMoved++
		s.moves.set(r)
	}
	if n := s.sessionsOf(m.InstanceID); n > 0 {
		r.State, r.Reason = api.MoveFailed, fmt.Sprintf("%d session(s) of the instance cannot move (a shared-memory arena, an ivshmem channel, or a restore under way)", n)
		return r
	}
	r.State = api.MoveDone
	return r
}

// sessionsOf counts the sessions of instance sid still served here (not handed off).
func (s *Server) sessionsOf(sid string) int {
	s.mu.Lock()
	var of []*session
	for _, se := range s.sessions {
		if se.claims.SessionID == sid {
			of = append(of, se)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, se := range of {
		if !se.handedOff() {
			n++
		}
	}
	return n
}

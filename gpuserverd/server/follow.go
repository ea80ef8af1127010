package server

import (
	"context"
	"errors"
	"time"

	"gpucloud/api"
)

// A session of an instance whose move ran here, opened after the move took the instance's
// sessions (its VM's guest.conf names this server until hostd rewrites the seed), follows the
// move: when the apiserver names it no longer placed here, it is migrated to the move's target
// instead of ended (the chaos test's drains cut a guest that started just after its instance's
// move was done). Only if that fails for followTries is it ended.

const (
	// followWindow is how long after a move began a late session of its instance follows it.
	followWindow = 2 * time.Minute
	// followTries, followPause: a new session can move once its guest asked to resume (just
	// after its handshake).
	followTries = 40
	followPause = 50 * time.Millisecond
)

// awayMove is an instance's move from here and until when its late sessions follow it.
type awayMove struct {
	move  api.GPUServerMove
	until time.Time
}

// noteAway remembers m, started now, for the instance's late sessions.
func (b *moveBook) noteAway(m api.GPUServerMove, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.away == nil {
		b.away = map[string]awayMove{}
	}
	for id, a := range b.away {
		if now.After(a.until) {
			delete(b.away, id)
		}
	}
	b.away[m.InstanceID] = awayMove{move: m, until: now.Add(followWindow)}
}

// follow claims sid for a follow-up migration: its move, and whether the caller runs it (false:
// no recent move, or one already running).
func (b *moveBook) follow(sid string, now time.Time) (api.GPUServerMove, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.away[sid]
	if !ok || now.After(a.until) || b.following[sid] {
		return api.GPUServerMove{}, false
	}
	if b.following == nil {
		b.following = map[string]bool{}
	}
	b.following[sid] = true
	return a.move, true
}

func (b *moveBook) followed(sid string) {
	b.mu.Lock()
	delete(b.following, sid)
	b.mu.Unlock()
}

func (b *moveBook) isFollowing(sid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.following[sid]
}

// followMoves takes out of ids the sessions that follow their instance's move (started now, or
// already under way) and returns the rest, to be ended.
func (s *Server) followMoves(ctx context.Context, ids []string) []string {
	var end []string
	for _, id := range ids {
		if s.moves.isFollowing(id) {
			continue
		}
		m, ok := s.moves.follow(id, time.Now())
		if !ok {
			end = append(end, id)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.moves.followed(id)
			s.followMove(ctx, id, m)
		}()
	}
	return end
}

// followMove migrates the instance's sessions still here to the move's target, ending those it
// cannot move.
func (s *Server) followMove(ctx context.Context, sid string, m api.GPUServerMove) {
	req := MigrateRequest{Target: m.Target, Token: m.Token.Token}
	var err error
	for try := 0; try < followTries; try++ {
		if _, serr := s.sessionByID(sid); errors.Is(serr, ErrNoSession) {
			return
		}
		if _, err = s.MigrateSession(ctx, sid, req); err == nil {
			s.log.Info("drain: a session opened after its instance's move followed it", "session", sid, "move", m.MoveID, "target", m.Target)
			try = -1 // the next of the instance's sessions, if any
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(followPause):
		}
	}
	s.log.Warn("drain: a session opened after its instance's move could not follow it; ending it", "session", sid, "move", m.MoveID, "err", err)
	s.endWhereID(sid)
}

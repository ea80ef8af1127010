package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

// awayFile keeps the book of moves off this server across its restarts: the apiserver names a
// move only while it is open, so a gpuserverd killed or restarted after a move took its
// instance's sessions would otherwise end the instance's late sessions instead of sending them
// after it (the chaos test's guest, started with the old guest.conf just after such a restart,
// saw its session ended and its next call fail).
const awayFile = "moves.away"

// awayMove is an instance's move from here and until when its late sessions follow it.
type awayMove struct {
	Move  api.GPUServerMove `json:"move"`
	Until time.Time         `json:"until"`
}

// noteAway remembers m, started now, for the instance's late sessions, on disk before the move
// runs: a restart at any point of the move finds it.
func (b *moveBook) noteAway(m api.GPUServerMove, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.away == nil {
		b.away = map[string]awayMove{}
	}
	for id, a := range b.away {
		if now.After(a.Until) {
			delete(b.away, id)
		}
	}
	until := now.Add(followWindow)
	if exp := m.Token.ExpiresAt; !exp.IsZero() && exp.Before(until) {
		until = exp // past it the target refuses the move's token
	}
	b.away[m.InstanceID] = awayMove{Move: m, Until: until}
	return b.saveAway()
}

// saveAway replaces awayFile with the book (b.mu held); without a data dir it lives in memory.
func (b *moveBook) saveAway() error {
	if b.awayPath == "" {
		return nil
	}
	list := make([]awayMove, 0, len(b.away))
	for _, a := range b.away {
		list = append(list, a)
	}
	data, err := json.Marshal(list)
	if err == nil {
		err = replaceFile(b.awayPath, data)
	}
	if err != nil {
		return fmt.Errorf("moves off this server: %w", err)
	}
	return nil
}

// loadAway reads the book an earlier gpuserverd left at path, keeping the moves whose window
// is still open at now, and keeps the book there from now on. It returns how many it kept. A
// file that is not a book is an error and leaves the book empty.
func (b *moveBook) loadAway(path string, now time.Time) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.awayPath = path
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("moves off this server: %w", err)
	}
	var list []awayMove
	if err := json.Unmarshal(data, &list); err != nil {
		return 0, fmt.Errorf("moves off this server: %s: %w", path, err)
	}
	for i, a := range list {
		if m := a.Move; m.InstanceID == "" || m.Target == "" || m.Token.Token == "" {
			return 0, fmt.Errorf("moves off this server: %s: entry %d: move.instance_id, move.target and move.token are required", path, i)
		}
	}
	if b.away == nil {
		b.away = map[string]awayMove{}
	}
	for _, a := range list {
		if now.Before(a.Until) {
			b.away[a.Move.InstanceID] = a
		}
	}
	return len(b.away), nil
}

// cameBack forgets the move of instance off this server: the instance is moving back here, so
// its sessions here are no longer late ones to send after it (the chaos test's keeper, moved
// away and back, had the session it brought back sent away again at once).
func (b *moveBook) cameBack(instance string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.away[instance]; !ok {
		return nil
	}
	delete(b.away, instance)
	return b.saveAway()
}

// follow claims sid for a follow-up migration: its move, and whether the caller runs it (false:
// no recent move, or one already running).
func (b *moveBook) follow(sid string, now time.Time) (api.GPUServerMove, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.away[sid]
	if !ok || now.After(a.Until) || b.following[sid] {
		return api.GPUServerMove{}, false
	}
	if b.following == nil {
		b.following = map[string]bool{}
	}
	b.following[sid] = true
	return a.Move, true
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

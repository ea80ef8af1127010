package server

import (
	"context"
	"syscall"

	"gpucloud/internal/sessiontoken"
)

// EndSessions kills the workers of the named sessions, which the apiserver says no live instance
// holds any more (the VM was deleted). The worker's death closes the guest's connection and
// writes the session's usage record as any ending does. It returns how many it ended.
func (s *Server) EndSessions(ctx context.Context, ids []string) int {
	ids = s.followMoves(ctx, ids) // those of an instance moved from here follow it (follow.go)
	if len(ids) == 0 {
		return 0
	}
	end := map[string]bool{}
	for _, id := range ids {
		end[id] = true
	}
	return s.endWhere(func(c sessiontoken.Claims) bool { return end[c.SessionID] },
		"ending a session the apiserver no longer places here")
}

// endWhere kills the workers of the sessions whose claims match, and closes the matching NVML
// connections (nvml.go), logging why; it returns how many sessions it ended.
// endWhereID ends the sessions with id sid.
func (s *Server) endWhereID(sid string) int {
	return s.endWhere(func(c sessiontoken.Claims) bool { return c.SessionID == sid },
		"ending a session the apiserver no longer places here")
}

func (s *Server) endWhere(match func(sessiontoken.Claims) bool, why string) int {
	s.endMonitors(match)
	s.mu.Lock()
	var victims []*session
	for _, se := range s.sessions {
		if match(se.claims) {
			victims = append(victims, se)
		}
	}
	s.mu.Unlock()
	for _, se := range victims {
		s.log.Info(why, "session", se.claims.SessionID, "instance", se.claims.InstanceID,
			"tenant", se.claims.TenantID, "worker_pid", se.pid)
		if err := syscall.Kill(se.pid, syscall.SIGKILL); err != nil {
			s.log.Warn("ending session", "session", se.claims.SessionID, "err", err)
		}
	}
	return len(victims)
}

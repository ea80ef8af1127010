package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"time"

	"gpucloud/gpuserverd/worker"
)

// SessionInfo is one session as the admin API lists it.
type SessionInfo struct {
	SessionID   string    `json:"session_id"`
	TenantID    string    `json:"tenant_id"`
	InstanceID  string    `json:"instance_id,omitempty"`
	Tier        string    `json:"tier"`
	WorkerPid   int       `json:"worker_pid"`
	Start       time.Time `json:"start"`
	MemoryBytes uint64    `json:"memory_bytes"`
	// State: "running", "migrating" (moving away, or stopping for a restore), "moved" (handed
	// off or stopped, its worker draining),
	// "restoring" (taken in, not yet live here).
	State     string                    `json:"state"`
	Migration *worker.MigrationProgress `json:"migration,omitempty"`
}

// Sessions lists the sessions this server runs.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, se := range s.sessions {
		all = append(all, se)
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(all))
	for _, se := range all {
		se.mu.Lock()
		snap := se.last
		se.mu.Unlock()
		state := "running"
		switch {
		case !snap.HandedOff.IsZero():
			state = "moved"
		case se.migrating.Load():
			state = "migrating"
		case se.incoming && snap.BillFrom.IsZero():
			state = "restoring"
		}
		c := se.claims
		out = append(out, SessionInfo{SessionID: c.SessionID, TenantID: c.TenantID, InstanceID: c.InstanceID, Tier: c.Tier,
			WorkerPid: se.pid, Start: se.start.UTC(), MemoryBytes: snap.MemoryBytes, State: state, Migration: snap.Migration})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out
}

// maxAdminBody bounds an admin request's body (a token and two addresses).
const maxAdminBody = 16 << 10

func (s *Server) mobilityRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/sessions", s.requireAdmin(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"sessions": s.Sessions()})
	}))
	mux.HandleFunc("POST /admin/sessions/{id}/checkpoint", s.requireAdmin(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stop bool `json:"stop"`
		}
		if r.ContentLength != 0 && !readJSON(w, r, &req) {
			return
		}
		res, err := s.CheckpointSession(r.Context(), r.PathValue("id"), req.Stop)
		if err != nil {
			writeJSON(w, statusOf(err), map[string]any{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, res)
	}))
	mux.HandleFunc("POST /admin/sessions/{id}/migrate", s.requireAdmin(func(w http.ResponseWriter, r *http.Request) {
		var req MigrateRequest
		if !readJSON(w, r, &req) {
			return
		}
		prog, err := s.MigrateSession(r.Context(), r.PathValue("id"), req)
		if err != nil {
			writeJSON(w, statusOf(err), map[string]any{"error": err.Error(), "migration": prog})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"migration": prog})
	}))
	mux.HandleFunc("POST /admin/restore", s.requireAdmin(func(w http.ResponseWriter, r *http.Request) {
		var req RestoreRequest
		if !readJSON(w, r, &req) {
			return
		}
		if err := s.RestoreSession(req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"restoring": req.Path})
	}))
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrNoSession):
		return http.StatusNotFound
	case errors.Is(err, worker.ErrNotMovable):
		return http.StatusConflict
	}
	return http.StatusBadGateway
}

// readJSON decodes the request body into v, answering 400 naming the problem when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "request body: " + err.Error()})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

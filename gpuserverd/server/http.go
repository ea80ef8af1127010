package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"gpucloud/gpuserverd/usage"
)

// Handler serves the admin port (admin.go: all but /healthz want the admin token):
//
//	GET /usage?after=<id>  usage records after id, oldest first (at most usage.MaxPage)
//	GET /metrics           Prometheus text format
//	GET /healthz           200 "ok"
//	GET  /admin/sessions                   sessions with their state and migration progress
//	POST /admin/sessions/{id}/checkpoint   write the session's image under the data dir ({"stop": true}: and end it here, for a restore)
//	POST /admin/sessions/{id}/migrate      move it to another server (MigrateRequest)
//	POST /admin/restore                    restore a checkpoint (RestoreRequest)
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.mobilityRoutes(mux)
	mux.HandleFunc("GET /usage", s.requireAdmin(func(w http.ResponseWriter, r *http.Request) {
		recs, err := s.usage.After(r.URL.Query().Get("after"))
		if errors.Is(err, usage.ErrUnknownID) {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"records": recs})
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /metrics", s.requireAdmin(s.serveMetrics))
	return mux
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	m := s.metrics
	active := len(s.sessions)
	var mem uint64
	for _, se := range s.sessions {
		se.mu.Lock()
		mem += se.last.MemoryBytes
		se.mu.Unlock()
	}
	reasons := make([]string, 0, len(m.refusedBy))
	for r := range m.refusedBy {
		reasons = append(reasons, r)
	}
	by := make(map[string]uint64, len(m.refusedBy))
	for k, v := range m.refusedBy {
		by[k] = v
	}
	s.mu.Unlock()
	sort.Strings(reasons)
	var b strings.Builder
	metric := func(name, kind, help string) { fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind) }
	metric("gpuserverd_sessions_active", "gauge", "Sessions with a running worker.")
	fmt.Fprintf(&b, "gpuserverd_sessions_active %d\n", active)
	metric("gpuserverd_sessions_accepted_total", "counter", "Sessions admitted.")
	fmt.Fprintf(&b, "gpuserverd_sessions_accepted_total %d\n", m.accepted)
	metric("gpuserverd_sessions_refused_total", "counter", "Sessions refused at the handshake, by reason.")
	for _, r := range reasons {
		fmt.Fprintf(&b, "gpuserverd_sessions_refused_total{reason=%q} %d\n", r, by[r])
	}
	metric("gpuserverd_session_memory_bytes", "gauge", "GPU memory held by active sessions.")
	fmt.Fprintf(&b, "gpuserverd_session_memory_bytes %d\n", mem)
	metric("gpuserverd_arena_bytes", "gauge", "Shared-memory arenas (pinned host memory) held by active sessions.")
	fmt.Fprintf(&b, "gpuserverd_arena_bytes %d\n", s.arenas.inUse())
	metric("gpuserverd_arena_limit_bytes", "gauge", "The limit on all sessions' arenas together.")
	fmt.Fprintf(&b, "gpuserverd_arena_limit_bytes %d\n", s.arenas.total)
	pending, shed := s.gate.stats()
	metric("gpuserverd_handshakes_pending", "gauge", "Connections that have not authenticated yet.")
	fmt.Fprintf(&b, "gpuserverd_handshakes_pending %d\n", pending)
	metric("gpuserverd_handshakes_shed_total", "counter", "Connections closed unserved: over a pre-authentication limit.")
	fmt.Fprintf(&b, "gpuserverd_handshakes_shed_total %d\n", shed)
	metric("gpuserverd_usage_records_total", "counter", "Usage records logged.")
	fmt.Fprintf(&b, "gpuserverd_usage_records_total %d\n", s.usage.Len())
	metric("gpuserverd_usage_errors_total", "counter", "Usage records that could not be written.")
	fmt.Fprintf(&b, "gpuserverd_usage_errors_total %d\n", m.usageErrors)
	metric("gpuserverd_sessions_cut_total", "counter", "Sessions an earlier gpuserverd left open (killed mid-session), closed at start-up.")
	fmt.Fprintf(&b, "gpuserverd_sessions_cut_total %d\n", m.cut)
	metric("gpuserverd_sessions_adopted_total", "counter", "Sessions whose workers an earlier gpuserverd left running, adopted at start-up.")
	fmt.Fprintf(&b, "gpuserverd_sessions_adopted_total %d\n", m.adopted)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write([]byte(b.String()))
}

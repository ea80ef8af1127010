// Package cpfake is a fake control plane for hostd tests: an in-process HTTP server that speaks
// the agent API of api/agent.go the way the apiserver does, holding its state in memory. It is a
// test double, standing in until tests run against the real apiserver.
package cpfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
)

// Server is the fake apiserver.
type Server struct {
	srv        *httptest.Server
	credential string

	mu         sync.Mutex
	heartbeats int
	report     api.HostReport
	instances  map[string]*api.DesiredInstance
	observed   map[string]api.InstanceObserved
	history    map[string][]string
	usage      map[string]api.UsageRecord
	renewals   map[string]int
	volumes    []api.DesiredVolume // nil: the answer has no volumes list (an older apiserver)
	moves      map[string][]api.HostMoveReport
}

// New starts a fake control plane accepting credential; it stops with the test.
func New(t testing.TB, credential string) *Server {
	s := &Server{
		credential: credential,
		instances:  map[string]*api.DesiredInstance{},
		observed:   map[string]api.InstanceObserved{},
		history:    map[string][]string{},
		usage:      map[string]api.UsageRecord{},
		renewals:   map[string]int{},
		moves:      map[string][]api.HostMoveReport{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/agent/host/heartbeat", s.heartbeat)
	mux.HandleFunc("GET /v1/agent/host/instances", s.list)
	mux.HandleFunc("PUT /v1/agent/host/instances/{id}/status", s.status)
	mux.HandleFunc("POST /v1/agent/host/instances/{id}/token", s.token)
	mux.HandleFunc("POST /v1/agent/usage", s.pushUsage)
	mux.HandleFunc("PUT /v1/agent/host/moves/{id}", s.moveReport)
	s.srv = httptest.NewServer(s.auth(mux))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Client returns hostd's real HTTP client pointed at the fake.
func (s *Server) Client(t testing.TB) *controlplane.HTTP {
	c, err := controlplane.NewHTTP(s.srv.URL, s.credential)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func problem(w http.ResponseWriter, code int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(code), "status": code, "detail": detail})
}

func (s *Server) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.credential {
			problem(w, http.StatusUnauthorized, "bad host credential")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		problem(w, http.StatusBadRequest, "body: "+err.Error())
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var rep api.HostReport
	if !decode(w, r, &rep) {
		return
	}
	if rep.Hostname == "" {
		problem(w, http.StatusUnprocessableEntity, "hostname is required")
		return
	}
	s.mu.Lock()
	s.heartbeats++
	s.report = rep
	s.mu.Unlock()
	reply(w, api.HostAck{HostID: "host-" + rep.Hostname, HeartbeatPeriod: 10 * time.Second})
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := api.DesiredInstances{Instances: []api.DesiredInstance{}, Volumes: s.volumes}
	for _, d := range s.instances {
		out.Instances = append(out.Instances, *d)
	}
	sort.Slice(out.Instances, func(i, j int) bool { return out.Instances[i].ID < out.Instances[j].ID })
	reply(w, out)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var o api.InstanceObserved
	if !decode(w, r, &o) {
		return
	}
	switch o.State {
	case api.ObservedProvisioning, api.ObservedRunning, api.ObservedStopped, api.ObservedDeleted, api.ObservedFailed:
	default:
		problem(w, http.StatusUnprocessableEntity, fmt.Sprintf("state %q unknown", o.State))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.instances[id]
	if !ok {
		problem(w, http.StatusNotFound, "no instance "+id+" on this host")
		return
	}
	s.observed[id] = o
	if h := s.history[id]; len(h) == 0 || h[len(h)-1] != o.State {
		s.history[id] = append(h, o.State)
	}
	// Like the apiserver: once the host confirms a deletion, the instance leaves its list.
	if d.DesiredState == api.DesiredDeleted && o.State == api.ObservedDeleted {
		delete(s.instances, id)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.instances[id]
	if !ok {
		problem(w, http.StatusNotFound, "no instance "+id)
		return
	}
	s.renewals[id]++
	d.Token = api.SessionToken{Token: fmt.Sprintf("tok-%s-r%d", id, s.renewals[id]), ExpiresAt: time.Now().Add(time.Hour)}
	reply(w, d.Token)
}

func (s *Server) pushUsage(w http.ResponseWriter, r *http.Request) {
	var b api.UsageBatch
	if !decode(w, r, &b) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := api.UsageBatchResult{Rejected: []api.UsageRejection{}}
	for i, rec := range b.Records {
		switch {
		case rec.ID == "" || rec.Kind != api.UsageVM || !rec.End.After(rec.Start):
			res.Rejected = append(res.Rejected, api.UsageRejection{Index: i, ID: rec.ID, Reason: "bad vm record"})
		case s.usage[rec.ID].ID != "":
			res.Duplicates++
		default:
			s.usage[rec.ID] = rec
			res.Accepted++
		}
	}
	reply(w, res)
}

// Put places or updates an instance on the host.
func (s *Server) Put(d api.DesiredInstance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := d
	s.instances[d.ID] = &c
}

// SetDesired changes an instance's desired state.
func (s *Server) SetDesired(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[id].DesiredState = state
}

// Forget drops an instance from the host's list without a deletion, as when the apiserver
// places it elsewhere.
func (s *Server) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.instances, id)
}

// Reboot asks for one more reboot of an instance.
func (s *Server) Reboot(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[id].RebootGeneration++
}

// Observed is the last state the host reported for an instance.
func (s *Server) Observed(id string) (api.InstanceObserved, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.observed[id]
	return o, ok
}

// History lists the distinct successive states reported for an instance.
func (s *Server) History(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.history[id], ",")
}

// Listed reports whether the instance is still in the host's desired list.
func (s *Server) Listed(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.instances[id]
	return ok
}

// Heartbeats returns the number of heartbeats and the last report.
func (s *Server) Heartbeats() (int, api.HostReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats, s.report
}

// Renewals counts token renewals of an instance.
func (s *Server) Renewals(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewals[id]
}

// Usage returns the accepted usage records.
func (s *Server) Usage() []api.UsageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []api.UsageRecord
	for _, r := range s.usage {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SetVolumes sets the volumes the host keeps in its pool.
func (s *Server) SetVolumes(v []api.DesiredVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.volumes = append([]api.DesiredVolume{}, v...)
}

func (s *Server) moveReport(w http.ResponseWriter, r *http.Request) {
	var rep api.HostMoveReport
	if !decode(w, r, &rep) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	known := false
	for _, d := range s.instances {
		known = known || (d.Move != nil && d.Move.ID == id)
	}
	if !known {
		problem(w, http.StatusNotFound, "no such move of this host")
		return
	}
	s.moves[id] = append(s.moves[id], rep)
	w.WriteHeader(http.StatusNoContent)
}

// MoveReports are the reports the host sent on a move, in order.
func (s *Server) MoveReports(id string) []api.HostMoveReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.HostMoveReport(nil), s.moves[id]...)
}

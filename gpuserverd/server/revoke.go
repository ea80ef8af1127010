package server

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"gpucloud/api"
	"gpucloud/internal/sessiontoken"
)

// Session revocation (issue 13, finding 2). Tokens are verified offline, so on its own a GPU
// server would honour a stopped or deleted instance's token until it expires. RunRevocations
// long-polls the apiserver for this server's revoked instances (api.Revocations; the apiserver
// answers within a second of the change), keeps them in a deny-list, refuses Hellos whose token
// an entry covers (issued at or before the revocation: a later token is the instance's next
// start) and kills the workers of the sessions it covers. The apiserver sends the whole set each
// time, for one token lifetime, so a restart or a lost connection just asks again.

// revocationWait is the long-poll's wait; the HTTP client's timeout leaves it room.
const revocationWait = 20 * time.Second

// denyList is the instances whose tokens are revoked, with when.
type denyList struct {
	mu     sync.Mutex
	at     map[string]int64 // instance id -> revoked at (unix seconds)
	synced chan struct{}    // closed at the first set received
	once   sync.Once
}

func newDenyList() *denyList { return &denyList{at: map[string]int64{}, synced: make(chan struct{})} }

// revoked says whether c's token is one the apiserver revoked.
func (d *denyList) revoked(c sessiontoken.Claims) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[c.InstanceID]
	return ok && c.IssuedAt <= at
}

// replace makes set the whole deny-list.
func (d *denyList) replace(set []api.RevokedInstance) {
	m := make(map[string]int64, len(set))
	for _, r := range set {
		m[r.InstanceID] = r.RevokedAt.Unix()
	}
	d.mu.Lock()
	d.at = m
	d.mu.Unlock()
	d.once.Do(func() { close(d.synced) })
}

// Revoke applies a revocation set: later Hellos with the revoked tokens are refused and the
// sessions they opened are ended (their workers killed; their usage is recorded as any end's).
// It returns how many sessions it ended.
func (s *Server) Revoke(set []api.RevokedInstance) int {
	s.denied.replace(set)
	return s.endWhere(s.denied.revoked,
		"ending a session whose instance was stopped or deleted")
}

// RevocationsSynced is closed once the first revocation set has arrived: a server that has
// just started may wait on it (with a bound) before admitting sessions.
func (s *Server) RevocationsSynced() <-chan struct{} { return s.denied.synced }

// RunRevocations long-polls the apiserver's revocations until ctx ends, retrying with backoff.
func (s *Server) RunRevocations(ctx context.Context, hb Heartbeat) {
	client := &http.Client{Timeout: revocationWait + 10*time.Second}
	known := ""
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		var set api.Revocations
		path := "/v1/agent/gpu-server/revocations?known=" + url.QueryEscape(known) + "&wait=" + revocationWait.String()
		if err := agentCall(ctx, client, hb, http.MethodGet, path, "", nil, &set); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("revocations from apiserver", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if set.Version != known {
			known = set.Version
			if n := s.Revoke(set.Instances); n > 0 {
				s.log.Info("revocations applied", "instances", len(set.Instances), "sessions_ended", n)
			}
		}
	}
}

// Package console serves instances' interactive serial consoles to the apiserver (the protocol
// is in package api, ConsolePath): each connection presents a console grant the apiserver signed
// for one instance on this host, used once; hostd attaches to the domain's serial console
// through libvirt and relays until either side ends, the session idles out, or the VM stops.
// One session per instance: libvirt refuses a second attach, and so does the server before it.
package console

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/net/websocket"

	"gpucloud/api"
	"gpucloud/hostd/virt"
	"gpucloud/internal/consolegrant"
	"gpucloud/internal/termrelay"
)

// Server serves GET ConsolePath{id}.
type Server struct {
	// Auth returns this host's id and the apiserver's grant key; empty before registration.
	Auth func() (hostID string, key ed25519.PublicKey)
	// Open attaches to the instance's serial console (virt.Hypervisor.OpenConsole by domain).
	Open   func(instanceID string) (io.ReadWriteCloser, error)
	Limits termrelay.Limits // zero: 64 KiB frames, 30 min idle (the apiserver keeps its own)
	Log    *slog.Logger
	Now    func() time.Time

	grants consolegrant.Once
	mu     sync.Mutex
	active map[string]bool // instance id -> a session is attached
	ctx    context.Context // ends the sessions when the server stops
}

// Handler returns the console endpoint; sessions end when ctx does.
func (s *Server) Handler(ctx context.Context) http.Handler {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Limits.MaxFrame == 0 {
		s.Limits.MaxFrame = 64 << 10
	}
	if s.Limits.Idle == 0 {
		s.Limits.Idle = 30 * time.Minute
	}
	s.ctx = ctx
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.ConsolePath+"{id}", s.serve)
	return mux
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err != nil {
		http.Error(w, "instance id: not a UUID", http.StatusBadRequest)
		return
	}
	claims, status, err := s.admit(r, id)
	if err != nil {
		s.Log.Warn("console connection refused", "instance", id, "remote", r.RemoteAddr, "err", err)
		http.Error(w, err.Error(), status)
		return
	}
	// Past the grant, every answer is a ConsoleHello inside the WebSocket, so the apiserver can
	// tell a busy console from a stopped VM.
	websocket.Server{Handler: func(ws *websocket.Conn) { s.session(ws, claims) }}.ServeHTTP(w, r)
}

// admit checks the grant in the Authorization header for instance id.
func (s *Server) admit(r *http.Request, id string) (consolegrant.Claims, int, error) {
	hostID, key := s.Auth()
	if hostID == "" || key == nil {
		return consolegrant.Claims{}, http.StatusServiceUnavailable, errors.New("this host is not registered with the apiserver yet")
	}
	grant, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return consolegrant.Claims{}, http.StatusUnauthorized, errors.New("a console grant (Authorization: Bearer) is required")
	}
	now := s.Now()
	c, err := consolegrant.Verify(key, grant, hostID, now)
	if err != nil {
		return c, http.StatusUnauthorized, err
	}
	if c.InstanceID != id {
		return c, http.StatusForbidden, fmt.Errorf("the grant is for instance %s", c.InstanceID)
	}
	if err := s.grants.Use(c, now); err != nil {
		return c, http.StatusUnauthorized, err
	}
	return c, 0, nil
}

func (s *Server) session(ws *websocket.Conn, c consolegrant.Claims) {
	defer ws.Close()
	hello := func(status int, detail string) {
		websocket.JSON.Send(ws, api.ConsoleHello{Status: status, Detail: detail})
	}
	if !s.claim(c.InstanceID) {
		hello(http.StatusConflict, virt.ErrConsoleBusy.Error())
		return
	}
	defer s.release(c.InstanceID)
	con, err := s.Open(c.InstanceID)
	if err != nil {
		status := http.StatusBadGateway
		switch {
		case errors.Is(err, virt.ErrNotFound):
			status = http.StatusNotFound
		case errors.Is(err, virt.ErrConsoleBusy):
			status = http.StatusConflict
		case errors.Is(err, virt.ErrConsoleUnsupported):
			status = http.StatusNotImplemented
		}
		s.Log.Warn("console open failed", "instance", c.InstanceID, "err", err)
		hello(status, err.Error())
		return
	}
	if err := websocket.JSON.Send(ws, api.ConsoleHello{Status: http.StatusOK}); err != nil {
		con.Close()
		return
	}
	s.Log.Info("console attached", "instance", c.InstanceID, "tenant", c.TenantID, "user", c.UserID)
	st := termrelay.Pipe(s.ctx, ws, con, s.Limits)
	s.Log.Info("console detached", "instance", c.InstanceID, "bytes_in", st.In, "bytes_out", st.Out, "reason", st.Reason)
}

func (s *Server) claim(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.active = map[string]bool{}
	}
	if s.active[id] {
		return false
	}
	s.active[id] = true
	return true
}

func (s *Server) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, id)
}

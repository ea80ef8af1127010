package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"golang.org/x/net/websocket"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/consolegrant"
	"gpucloud/internal/problem"
	"gpucloud/internal/termrelay"
)

// Interactive serial consoles. A caller who may see an instance asks for a ticket (POST, with
// the usual API key or session cookie and CSRF header), then opens the WebSocket with the ticket
// in the query: browsers cannot set headers on a WebSocket, and a cookie alone would let any
// site open one in the victim's name. The apiserver redeems the ticket (once, within 30 s), signs
// a console grant for the instance's host, connects to hostd's console endpoint (api.ConsolePath)
// and relays both ways. Opening and closing are audited as the ticket's holder, with the bytes
// moved each way.

// ConsoleLimits bound interactive console sessions; zero fields take the defaults.
type ConsoleLimits struct {
	MaxSessions int           // open at once on this apiserver (default 64); hostd allows one per instance
	MaxFrame    int           // bytes in one frame from the user (default 16 KiB)
	Idle        time.Duration // no traffic either way this long closes the session (default 15 min)
	MaxDuration time.Duration // a session is closed after this long whatever it does (default 8 h)
	// HostTLS verifies hosts' wss:// console endpoints (nil: the system roots).
	HostTLS *tls.Config
}

func (l ConsoleLimits) withDefaults() ConsoleLimits {
	if l.MaxSessions <= 0 {
		l.MaxSessions = 64
	}
	if l.MaxFrame <= 0 {
		l.MaxFrame = 16 << 10
	}
	if l.Idle <= 0 {
		l.Idle = 15 * time.Minute
	}
	if l.MaxDuration <= 0 {
		l.MaxDuration = 8 * time.Hour
	}
	return l
}

// ConsoleTicketResponse is a ticket for one console session and where to use it.
type ConsoleTicketResponse struct {
	store.ConsoleTicket
	// URL is the WebSocket's path and query on this apiserver (ws:// or wss:// per the API's scheme).
	URL string `json:"url"`
}

const consoleWSPath = "/v1/instances/:id/console/ws"

func (s *Server) consoleRoutes(r *gin.Engine, v1 *gin.RouterGroup) {
	v1.POST("/instances/:id/console/tickets", s.handle(s.createConsoleTicket))
	// Outside the authenticated group: the ticket is the credential.
	r.GET(consoleWSPath, s.handle(s.openConsole))
}

func (s *Server) createConsoleTicket(c *gin.Context) error {
	if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember, authn.RoleOperator); err != nil {
		return err
	}
	scope, id, err := scopedInstanceID(c)
	if err != nil {
		return err
	}
	t, err := s.store.CreateConsoleTicket(c.Request.Context(), scope, id)
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, ConsoleTicketResponse{ConsoleTicket: t,
		URL: "/v1/instances/" + id.String() + "/console/ws?ticket=" + url.QueryEscape(t.Ticket)})
	return nil
}

func (s *Server) openConsole(c *gin.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ticket := c.Query("ticket")
	if ticket == "" {
		return unauthenticated("a console ticket is required (POST /v1/instances/{id}/console/tickets)")
	}
	if o := c.GetHeader("Origin"); o != "" {
		// Browsers name the page's origin; only the console's own pages open consoles.
		if u, err := url.Parse(o); err != nil || u.Host != c.Request.Host {
			return forbidden("a console is opened only from this apiserver's own pages (Origin " + o + ")")
		}
	}
	lim := s.opts.Console.withDefaults()
	if s.consoles.Add(1) > int64(lim.MaxSessions) {
		s.consoles.Add(-1)
		d := problem.New(http.StatusServiceUnavailable, "console-limit", "Too many consoles", "this apiserver has as many console sessions open as it allows; try again")
		d.Retryable = true
		return d
	}
	defer s.consoles.Add(-1)
	ctx := c.Request.Context()
	t, err := s.store.RedeemConsoleTicket(ctx, id, ticket)
	if errors.Is(err, store.ErrNotFound) {
		return unauthenticated("the console ticket is unknown, used, expired or for another instance")
	}
	if err != nil {
		return err
	}
	// The ticket is good: from here on the outcome travels inside the WebSocket, where browsers
	// and gpuctl can read it (a refused upgrade shows them no body).
	websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // Origin checked above
		Handler:   func(ws *websocket.Conn) { s.consoleSession(ctx, ws, t, lim, c.ClientIP()) },
	}.ServeHTTP(c.Writer, c.Request)
	return nil
}

// ConsoleStatus is the first text frame of a console WebSocket: status 200 and then binary
// frames both ways (keystrokes in, serial output out), or a problem and the end. The last text
// frame of a session says why it closed (termrelay.Closing).
type ConsoleStatus struct {
	Status int    `json:"status"`
	Type   string `json:"type,omitempty"`
	Title  string `json:"title,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func (s *Server) consoleSession(ctx context.Context, ws *websocket.Conn, t store.ConsoleTarget, lim ConsoleLimits, remote string) {
	defer ws.Close()
	host, err := s.attachConsole(ctx, t, lim)
	if err != nil {
		var d *problem.Details
		if !errors.As(err, &d) {
			s.log.Error("console attach failed", "instance", t.InstanceID, "err", err)
			d = problem.New(http.StatusInternalServerError, "internal", "Internal error", "")
		}
		websocket.JSON.Send(ws, ConsoleStatus{Status: d.Status, Type: d.Type, Title: d.Title, Detail: d.Detail})
		return
	}
	opened := time.Now()
	if err := s.store.AuditConsole(ctx, t, "console-open", gin.H{"host_id": t.HostID, "remote_addr": remote}); err != nil {
		host.Close()
		s.log.Error("console open not audited; closing it", "instance", t.InstanceID, "err", err)
		websocket.JSON.Send(ws, ConsoleStatus{Status: http.StatusInternalServerError, Type: "internal", Title: "Internal error"})
		return
	}
	if err := websocket.JSON.Send(ws, ConsoleStatus{Status: http.StatusOK}); err != nil {
		host.Close()
	}
	// The connection is hijacked: the session ends by itself, at MaxDuration at the latest.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lim.MaxDuration)
	defer cancel()
	st := termrelay.Pipe(sctx, ws, host, termrelay.Limits{MaxFrame: lim.MaxFrame, Idle: lim.Idle, SayWhy: true})
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer acancel()
	if err := s.store.AuditConsole(actx, t, "console-close", gin.H{"host_id": t.HostID, "bytes_in": st.In,
		"bytes_out": st.Out, "reason": st.Reason, "duration_s": int64(time.Since(opened).Seconds())}); err != nil {
		s.log.Error("console close not audited", "instance", t.InstanceID, "err", err)
	}
}

// attachConsole checks the instance can have a console now and connects to its host.
func (s *Server) attachConsole(ctx context.Context, t store.ConsoleTarget, lim ConsoleLimits) (*websocket.Conn, error) {
	if t.State != "running" {
		return nil, problem.New(http.StatusConflict, "invalid-state", "Invalid state", "the instance is "+t.State+"; its console opens while it is running")
	}
	if t.ConsoleURL == "" {
		return nil, problem.New(http.StatusNotImplemented, "no-console", "No interactive console", "the instance's host serves no interactive consoles (hostd -console-listen)")
	}
	return s.dialHostConsole(ctx, t, lim)
}

// dialHostConsole connects to the instance's host with a fresh grant and reads hostd's hello;
// what hostd refuses becomes the caller's problem, before the caller's WebSocket is upgraded.
func (s *Server) dialHostConsole(ctx context.Context, t store.ConsoleTarget, lim ConsoleLimits) (*websocket.Conn, error) {
	user := ""
	if t.Principal.UserID != uuid.Nil {
		user = t.Principal.UserID.String()
	}
	grant, err := consolegrant.Sign(s.opts.TokenKey, consolegrant.New(t.InstanceID.String(), t.TenantID.String(),
		t.HostID.String(), user, time.Now()))
	if err != nil {
		return nil, err
	}
	cfg, err := websocket.NewConfig(strings.TrimSuffix(t.ConsoleURL, "/")+api.ConsolePath+t.InstanceID.String(), "http://apiserver")
	if err != nil {
		return nil, fmt.Errorf("host console URL %q: %w", t.ConsoleURL, err)
	}
	cfg.Header.Set("Authorization", "Bearer "+grant)
	cfg.TlsConfig = lim.HostTLS
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	unreachable := func(err error) error {
		s.log.Warn("host console unreachable", "host", t.HostID, "instance", t.InstanceID, "err", err)
		d := problem.New(http.StatusBadGateway, "host-unreachable", "Host unreachable", "the instance's host did not open its console")
		d.Retryable = true
		return d
	}
	ws, err := cfg.DialContext(dctx)
	if err != nil {
		return nil, unreachable(err)
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hello api.ConsoleHello
	if err := websocket.JSON.Receive(ws, &hello); err != nil {
		ws.Close()
		return nil, unreachable(err)
	}
	ws.SetReadDeadline(time.Time{})
	switch hello.Status {
	case http.StatusOK:
		return ws, nil
	case http.StatusConflict:
		ws.Close()
		return nil, problem.New(http.StatusConflict, "console-busy", "Console busy", "another console session is open on this instance; close it first")
	case http.StatusNotFound:
		ws.Close()
		return nil, problem.New(http.StatusConflict, "invalid-state", "Invalid state", "the instance is not running on its host yet (or any more)")
	case http.StatusNotImplemented:
		ws.Close()
		return nil, problem.New(http.StatusNotImplemented, "no-console", "No interactive console", "the instance's hypervisor cannot attach to serial consoles")
	}
	ws.Close()
	return nil, unreachable(fmt.Errorf("hello %d: %s", hello.Status, hello.Detail))
}

// validConsoleURL accepts what a host may report as its console endpoint: nothing, or a ws(s)
// URL with a host and no path, query or credentials.
func validConsoleURL(s string) bool {
	if s == "" {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && len(s) <= 512 && (u.Scheme == "ws" || u.Scheme == "wss") && u.Host != "" &&
		u.User == nil && (u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == ""
}

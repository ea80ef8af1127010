// Package server is the apiserver's HTTP layer: the gin router, its middleware (request ids,
// metrics, authentication, idempotency), the handlers of the /v1 API and the agent API, and the
// background sweeper that marks silent daemons unreachable.
package server

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/store"
	"gpucloud/internal/problem"
)

// Mount adds routes to the authenticated /v1 group (the principal is in c.Request.Context()).
type Mount func(v1 *gin.RouterGroup)

// Options configure a Server.
type Options struct {
	Store    *store.Store
	TokenKey ed25519.PrivateKey // signs session tokens
	// TokenTTL is how long a session token lives (default 1h).
	TokenTTL time.Duration
	// HeartbeatPeriod is what daemons are told (default 10s); UnreachableAfter is how long a
	// daemon may stay silent before it is marked unreachable (default 3 periods).
	HeartbeatPeriod  time.Duration
	UnreachableAfter time.Duration
	Logger           *slog.Logger
	// Mounts and Paths let other parts (billing) add routes and document them.
	Mounts []Mount
	Paths  []map[string]openapi.PathItem
	// Registry receives the metrics (default: a new registry with Go and process collectors).
	Registry *prometheus.Registry
	// TrustedProxies are the addresses or CIDRs of reverse proxies whose X-Forwarded-For names
	// the client (sign-in throttling is per client address). None by default: the header is
	// ignored, so a client cannot pick its own address.
	TrustedProxies []string
	// MetricsToken, when set, is a bearer token that reads /metrics (Prometheus); operators'
	// API keys read it too, nobody else.
	MetricsToken string
	// AdmitCreate, when set, may refuse a tenant's instance create with a problem (billing's
	// hard stop when prepaid credit is exhausted).
	AdmitCreate func(ctx context.Context, tenant uuid.UUID) *problem.Details
	// Console bounds interactive serial consoles (console.go).
	Console ConsoleLimits
	// IdempotencyLease is how long an Idempotency-Key's claim outlives its apiserver's last
	// renewal (default 10s; renewed every third of it while the request runs): a retry after an
	// apiserver died mid-request waits that long at most, then runs the request.
	IdempotencyLease time.Duration
}

// Server is the apiserver.
type Server struct {
	opts    Options
	store   *store.Store
	log     *slog.Logger
	engine  *gin.Engine
	doc     *openapi.Document
	metrics *metrics
	touched touchCache
	logins  loginLimiter // websession.go
	// consoles counts the interactive console sessions open here (console.go).
	consoles atomic.Int64
}

// New builds the server; it fails if mounted documentation collides with the apiserver's.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || len(opts.TokenKey) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("server: a store and an Ed25519 token key are required")
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.HeartbeatPeriod == 0 {
		opts.HeartbeatPeriod = 10 * time.Second
	}
	if opts.IdempotencyLease <= 0 {
		opts.IdempotencyLease = 10 * time.Second
	}
	if opts.UnreachableAfter == 0 {
		opts.UnreachableAfter = 3 * opts.HeartbeatPeriod
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s := &Server{opts: opts, store: opts.Store, log: opts.Logger, metrics: newMetrics(opts.Registry, opts.Store.KeyCacheLive)}
	s.doc = Document()
	for _, p := range opts.Paths {
		if err := s.doc.Merge(p); err != nil {
			return nil, err
		}
	}
	var err error
	if s.engine, err = s.routes(); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler is the HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Routes lists "METHOD /path" of every registered route, in OpenAPI path syntax.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.engine.Routes() {
		out = append(out, r.Method+" "+ginToOpenAPI(r.Path))
	}
	return out
}

// OpenAPI returns the served document.
func (s *Server) OpenAPI() *openapi.Document { return s.doc }

// ginReleaseMode sets gin's process-wide mode once: replicas built concurrently (tests) would
// otherwise race on it.
var ginReleaseMode = sync.OnceFunc(func() { gin.SetMode(gin.ReleaseMode) })

func (s *Server) routes() (*gin.Engine, error) {
	ginReleaseMode()
	r := gin.New()
	if err := r.SetTrustedProxies(s.opts.TrustedProxies); err != nil {
		return nil, fmt.Errorf("server: trusted proxies: %w", err)
	}
	r.HandleMethodNotAllowed = true
	r.Use(s.recoverer, s.requestID, s.observe, s.textQuery)
	r.NoRoute(func(c *gin.Context) { s.fail(c, notFound("no such route")) })
	r.NoMethod(func(c *gin.Context) {
		s.fail(c, problemf(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", "%s is not allowed here", c.Request.Method))
	})
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", s.readyz)
	r.GET("/metrics", s.metricsAccess, gin.WrapH(promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{})))
	r.GET("/v1/openapi.json", func(c *gin.Context) { c.JSON(http.StatusOK, s.doc) })

	v1 := r.Group("/v1", s.authenticate, s.idempotent)
	s.accountRoutes(v1)
	s.catalogRoutes(v1)
	s.imageRoutes(v1)
	s.sshKeyRoutes(v1)
	s.volumeRoutes(v1)
	s.instanceRoutes(v1)
	s.consoleRoutes(r, v1)
	s.fleetRoutes(v1)
	s.agentRoutes(v1.Group("/agent", s.daemonOnly))
	s.webRoutes(r, v1)
	for _, m := range s.opts.Mounts {
		m(v1)
	}
	return r, nil
}

func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		d := problemf(http.StatusServiceUnavailable, "not-ready", "Not ready", "database: %v", err)
		d.Retryable = true
		s.fail(c, d)
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

// RunSweeper marks silent daemons unreachable every period until ctx ends.
func (s *Server) RunSweeper(ctx context.Context, period time.Duration) {
	every(ctx, period, func() {
		n, err := s.store.MarkUnreachable(ctx, s.opts.UnreachableAfter)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweeper failed", "err", err)
		} else if n > 0 {
			s.log.Info("daemons marked unreachable", "count", n)
		}
	})
}

// every calls fn every period until ctx ends.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

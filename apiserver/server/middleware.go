package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

const requestIDKey = "request_id"

// requestID takes a sane X-Request-ID from the caller or makes one, and echoes it.
func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-ID")
	if id == "" || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	c.Set(requestIDKey, id)
	c.Header("X-Request-ID", id)
	c.Request = c.Request.WithContext(store.WithRequestID(c.Request.Context(), id))
	c.Next()
}

func (s *Server) recoverer(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(r)
			}
			s.log.Error("panic serving request", "path", c.Request.URL.Path, "panic", r)
			s.fail(c, problem.New(http.StatusInternalServerError, "internal", "Internal error", ""))
		}
	}()
	c.Next()
}

func unauthenticated(detail string) *problem.Details {
	return problem.New(http.StatusUnauthorized, "unauthenticated", "Unauthenticated", detail)
}

// authenticate resolves the bearer credential into an authn.Principal in the request context.
func (s *Server) authenticate(c *gin.Context) {
	h := c.GetHeader("Authorization")
	if h == "" && s.cookieAuth(c) { // the console's session cookie (websession.go)
		return
	}
	if h == "" {
		c.Header("WWW-Authenticate", `Bearer realm="gpucloud"`)
		s.fail(c, unauthenticated("missing Authorization: Bearer <api key>"))
		return
	}
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" || len(secret) > 256 {
		c.Header("WWW-Authenticate", `Bearer realm="gpucloud"`)
		s.fail(c, unauthenticated("Authorization must be \"Bearer <api key>\""))
		return
	}
	cred, err := s.store.Authenticate(c.Request.Context(), secret)
	if errors.Is(err, store.ErrNotFound) {
		c.Header("WWW-Authenticate", `Bearer realm="gpucloud", error="invalid_token"`)
		s.fail(c, unauthenticated("unknown or revoked credential"))
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	if cred.KeyID != uuid.Nil && time.Since(cred.LastUsedAt) > time.Minute && s.touched.claim(cred.KeyID) {
		// At most one write per key per minute, off the request's path.
		go func(id uuid.UUID) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.store.TouchAPIKey(ctx, id); err != nil {
				s.log.Warn("record key use", "key", id, "err", err)
			}
		}(cred.KeyID)
	}
	c.Request = c.Request.WithContext(authn.WithPrincipal(c.Request.Context(), cred.Principal))
	c.Next()
}

// touchCache remembers keys whose last-used time was written recently in this process, so a
// burst of requests with one key triggers one write, not one per request.
type touchCache struct {
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

func (t *touchCache) claim(id uuid.UUID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.at == nil || len(t.at) > 100_000 {
		t.at = map[uuid.UUID]time.Time{}
	}
	if now.Sub(t.at[id]) < time.Minute {
		return false
	}
	t.at[id] = now
	return true
}

func principal(c *gin.Context) authn.Principal {
	p, _ := authn.FromContext(c.Request.Context())
	return p
}

// require allows the request only for the given roles.
func require(c *gin.Context, roles ...authn.Role) error {
	p := principal(c)
	for _, r := range roles {
		if p.Role == r {
			return nil
		}
	}
	return forbidden("role " + string(p.Role) + " may not do this")
}

// daemonOnly guards the agent API; user keys are refused and daemon credentials are refused
// everywhere else by the role checks of each handler.
func (s *Server) daemonOnly(c *gin.Context) {
	if principal(c).Role != authn.RoleDaemon {
		s.fail(c, forbidden("the agent API is for host and GPU server credentials"))
	}
}

package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gpucloud/internal/httplimits"
)

// The admin port serves every tenant's usage records and the server's metrics, so it is
// authenticated and, by default, bound to localhost (issue 13, finding 7): VMs dial this
// machine's address, and a tenant must not read another's usage. Every route but /healthz (a
// liveness probe that says nothing) wants "Authorization: Bearer <token>": Config.AdminToken,
// or else a random one that New writes to <DataDir>/admin-token (0600) for local tools. Usage
// reaches billing by the push to the apiserver (ship.go), not through this port.

// AdminTokenFile is the file under the data dir holding a generated admin token.
const AdminTokenFile = "admin-token"

// Bounds on the admin port's connections before a request is authenticated.
const (
	adminMaxHeader   = 16 << 10
	adminReadTimeout = 10 * time.Second
	adminMaxConns    = 64
)

// loadAdminToken settles the admin token: the configured one, the one kept in the data dir, or
// a new one written there.
func (s *Server) loadAdminToken() error {
	if s.cfg.AdminToken != "" {
		return nil
	}
	path := filepath.Join(s.cfg.DataDir, AdminTokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		s.cfg.AdminToken = strings.TrimSpace(string(b))
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("admin token: %w", err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	tok := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	s.cfg.AdminToken = tok
	return nil
}

// AdminToken is the bearer token the admin routes want.
func (s *Server) AdminToken() string { return s.cfg.AdminToken }

// requireAdmin lets a request with the admin token through; any other gets 401.
func (s *Server) requireAdmin(h http.HandlerFunc) http.HandlerFunc {
	want := []byte("Bearer " + s.cfg.AdminToken)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpuserverd-admin"`)
			http.Error(w, "gpuserverd admin: the Authorization header must carry the admin token (--admin-token-file, or <data-dir>/admin-token)", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// adminServer is the admin port's HTTP server, bounded before any request is authenticated.
func (s *Server) adminServer() (*http.Server, func(net.Listener) net.Listener) {
	lim := httplimits.Limits{ReadHeaderTimeout: adminReadTimeout, ReadTimeout: adminReadTimeout,
		IdleTimeout: time.Minute, MaxHeaderBytes: adminMaxHeader, MaxConns: adminMaxConns}
	hs := lim.Server(s.Handler())
	hs.WriteTimeout = time.Minute
	return hs, lim.Listener
}

// Package app wires the apiserver together (database, server, sweeper, credentials listener,
// HTTP listener) for the apiserver command and the local stack.
package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/httplimits"
)

// Config is what Serve needs.
type Config struct {
	Listener net.Listener
	Store    *store.Store
	TokenKey ed25519.PrivateKey
	Logger   *slog.Logger
	// Options may set the server's extension points (Mounts, Paths) and timings.
	Options server.Options
	// HTTP bounds connections and how long a client may take to send a request (zero fields:
	// httplimits.Default).
	HTTP    httplimits.Limits
	Billing BillingConfig
}

// Serve runs the apiserver on cfg.Listener until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, cfg Config) error {
	opts := cfg.Options
	opts.Store, opts.TokenKey, opts.Logger = cfg.Store, cfg.TokenKey, cfg.Logger
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := NewServer(ctx, opts, cfg.Billing)
	if err != nil {
		return err
	}
	go srv.RunSweeper(ctx, 5*time.Second)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		cfg.Store.ListenCredentials(ctx, opts.Logger)
	}()
	defer func() { cancel(); <-listening }() // its connection is closed before we return
	hs := cfg.HTTP.Server(srv.Handler())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(cfg.HTTP.Listener(cfg.Listener)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("apiserver: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("apiserver: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Bootstrap creates a platform user (operator or finance) and returns it with an API key secret.
func Bootstrap(ctx context.Context, st *store.Store, email string, role authn.Role) (store.User, string, error) {
	ctx = authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	u := store.User{Email: email, Role: string(role)}
	if err := st.CreateUser(ctx, &u); err != nil {
		return u, "", err
	}
	_, secret, err := st.CreateAPIKey(ctx, u, "bootstrap")
	return u, secret, err
}

// TenantWithAdmin creates a tenant, its first admin and that admin's API key.
func TenantWithAdmin(ctx context.Context, st *store.Store, t store.Tenant, email string) (store.Tenant, store.User, string, error) {
	ctx = authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	if err := st.CreateTenant(ctx, &t); err != nil {
		return t, store.User{}, "", err
	}
	tid := t.ID
	u := store.User{Email: email, Role: string(authn.RoleTenantAdmin), TenantID: &tid}
	if err := st.CreateUser(ctx, &u); err != nil {
		return t, u, "", err
	}
	_, secret, err := st.CreateAPIKey(ctx, u, "bootstrap")
	return t, u, secret, err
}

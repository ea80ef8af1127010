package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// demoKeys are the local stack's first-run credentials, kept in .data/ so later runs print them again.
type demoKeys struct {
	OperatorKey string            `json:"operator_key"`
	TenantID    string            `json:"tenant_id"`
	TenantKey   string            `json:"tenant_admin_key"`
	FinanceKey  string            `json:"-"` // finance-key.json
	Passwords   map[string]string `json:"-"` // console sign-ins (passwords.go)
}

// startAPIServer serves the apiserver in-process on GPUCLOUD_APISERVER_ADDR (default
// 127.0.0.1:8080, or a free port when that is taken). It returns the base URL, the demo keys and
// a channel that yields Serve's result once ctx ends.
func startAPIServer(ctx context.Context, dbURL string, logger *slog.Logger) (string, demoKeys, <-chan error, error) {
	var keys demoKeys
	key, err := app.LoadOrCreateTokenKey(filepath.Join(dataDir(), "token.key"))
	if err != nil {
		return "", keys, nil, err
	}
	st, err := store.Open(ctx, dbURL, 0)
	if err != nil {
		return "", keys, nil, err
	}
	if keys, err = ensureDemo(ctx, st, filepath.Join(dataDir(), "demo-keys.json")); err != nil {
		st.Close()
		return "", keys, nil, err
	}
	if keys.Passwords, err = ensureDemoPasswords(ctx, st, filepath.Join(dataDir(), "demo-passwords.json")); err != nil {
		st.Close()
		return "", keys, nil, err
	}
	if keys.FinanceKey, err = ensureFinanceKey(ctx, st, filepath.Join(dataDir(), "finance-key.json")); err != nil {
		st.Close()
		return "", keys, nil, err
	}
	ln, err := listenAPI(filepath.Join(dataDir(), "apiserver.addr"), logger)
	if err != nil {
		st.Close()
		return "", keys, nil, fmt.Errorf("apiserver listen: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		defer st.Close()
		// Demo webhook receivers run on this machine: let deliveries reach loopback.
		done <- app.Serve(ctx, app.Config{Listener: ln, Store: st, TokenKey: key, Logger: logger,
			Billing: app.BillingConfig{WebhooksAllowPrivate: true}})
	}()
	return "http://" + ln.Addr().String(), keys, done, nil
}

// ensureDemo creates, on first run, an operator, a demo tenant with its admin, and a small
// catalog, and records the keys (mode 0600); later runs read them back.
func ensureDemo(ctx context.Context, st *store.Store, path string) (demoKeys, error) {
	return firstRun(path, func() (demoKeys, error) {
		var keys demoKeys
		var err error
		if _, keys.OperatorKey, err = app.Bootstrap(ctx, st, "operator@localhost", authn.RoleOperator); err != nil {
			return keys, fmt.Errorf("demo operator: %w", err)
		}
		t, _, tenantKey, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: "demo", QuotaInstances: 20, QuotaGPUs: 8,
			QuotaGPUMemoryBytes: 640 << 30}, "admin@demo.localhost")
		if err != nil {
			return keys, fmt.Errorf("demo tenant: %w", err)
		}
		keys.TenantID, keys.TenantKey = t.ID.String(), tenantKey
		return keys, demoCatalog(ctx, st)
	})
}

func demoCatalog(ctx context.Context, st *store.Store) error {
	ctx = authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	m := store.GPUModel{Name: "H100 80GB", MemoryBytes: 80 << 30, NVMLMatch: "H100"}
	if err := st.CreateGPUModel(ctx, &m); err != nil {
		return fmt.Errorf("demo catalog: %w", err)
	}
	for _, it := range []store.InstanceType{
		{Name: "h100-dedicated-1", VCPUs: 8, MemoryMiB: 65536, DiskGiB: 100, GPUModelID: &m.ID, GPUCount: 1, Tier: "dedicated", PricePerHour: 300, Currency: "USD"},
		{Name: "h100-shared-10g", VCPUs: 2, MemoryMiB: 8192, DiskGiB: 40, GPUModelID: &m.ID, GPUCount: 1, Tier: "shared", PricePerHour: 45, Currency: "USD"},
		{Name: "cpu-small", VCPUs: 1, MemoryMiB: 1024, DiskGiB: 10, Tier: "dedicated", PricePerHour: 2, Currency: "USD"},
	} {
		if err := st.CreateInstanceType(ctx, &it); err != nil {
			return fmt.Errorf("demo catalog: %w", err)
		}
	}
	return seedPriceBook(ctx, st)
}

// listenAPI listens where GPUCLOUD_APISERVER_ADDR says; else where the last run listened (kept in
// remember, so the URL in a developer's shell and gpuctl profile stays valid between runs), else
// on 127.0.0.1:8080, else on a free port. The address taken is remembered.
func listenAPI(remember string, logger *slog.Logger) (net.Listener, error) {
	if addr := os.Getenv("GPUCLOUD_APISERVER_ADDR"); addr != "" {
		return net.Listen("tcp", addr)
	}
	tries := []string{"127.0.0.1:8080", "127.0.0.1:0"}
	if b, err := os.ReadFile(remember); err == nil {
		tries = append([]string{strings.TrimSpace(string(b))}, tries...)
	}
	var errs []error
	for _, addr := range tries {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			logger.Info("apiserver address taken, trying the next", "addr", addr, "err", err)
			errs = append(errs, err)
			continue
		}
		if err := os.WriteFile(remember, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			ln.Close()
			return nil, fmt.Errorf("remember apiserver address: %w", err)
		}
		return ln, nil
	}
	return nil, errors.Join(errs...)
}

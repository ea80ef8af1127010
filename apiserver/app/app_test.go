package app

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// serve runs Serve with cfg on a fresh database and a loopback port until ctx ends; done
// carries Serve's result.
func serve(ctx context.Context, t *testing.T, cfg Config) (st *store.Store, addr string, done <-chan error) {
	t.Helper()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener, cfg.Store, cfg.TokenKey = ln, st, key
	d := make(chan error, 1)
	go func() { d <- Serve(ctx, cfg) }()
	return st, ln.Addr().String(), d
}

// TestServeMountsBilling runs the apiserver as the command and the local stack do, and checks
// billing's routes are served behind the apiserver's authentication and documented in its OpenAPI.
func TestServeMountsBilling(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, addr, done := serve(ctx, t, Config{})
	base := "http://" + addr

	_, financeKey, err := Bootstrap(ctx, st, "finance@example.com", authn.RoleFinance)
	if err != nil {
		t.Fatal(err)
	}
	_, _, tenantKey, err := TenantWithAdmin(ctx, st, store.Tenant{Name: "acme"}, "admin@acme.example")
	if err != nil {
		t.Fatal(err)
	}

	get := func(path, apiKey string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		var resp *http.Response
		for i := 0; i < 50; i++ { // the listener is open at once; the router needs a moment
			if resp, err = http.DefaultClient.Do(req); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, body := get("/v1/reports/gpu-hours?group_by=tier&granularity=month", financeKey); code != http.StatusOK {
		t.Fatalf("finance report: %d %s", code, body)
	}
	if code, _ := get("/v1/reports/gpu-hours", tenantKey); code != http.StatusForbidden {
		t.Fatalf("a tenant admin reading the platform report got %d, want 403", code)
	}
	if code, _ := get("/v1/reports/gpu-hours", ""); code != http.StatusUnauthorized {
		t.Fatalf("no key got %d, want 401", code)
	}
	if code, body := get("/v1/invoices", tenantKey); code != http.StatusOK {
		t.Fatalf("tenant invoices: %d %s", code, body)
	}

	code, body := get("/v1/openapi.json", "")
	if code != http.StatusOK {
		t.Fatalf("openapi: %d", code)
	}
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/reports/gpu-hours", "/v1/agent/usage", "/v1/invoices", "/v1/instances"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("OpenAPI document lacks %s", p)
		}
	}
	if !strings.Contains(body, "gpu-hours") {
		t.Error("billing operations missing from the document")
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// serveForTest runs the apiserver with the default configuration on a fresh database until ctx
// ends: its store, its base URL and where Serve's result arrives.
func serveForTest(ctx context.Context, t *testing.T) (*store.Store, string, <-chan error) {
	t.Helper()
	st, addr, done := serve(ctx, t, Config{})
	return st, "http://" + addr, done
}

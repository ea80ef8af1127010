package server

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

func newServer(t *testing.T) (*Server, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	s, err := New(Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"},
		DataDir: t.TempDir(), BackendKind: sim.Kind}, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.usage.Close() })
	return s, priv
}

// Without a cuda backend registered, auto falls back to the simulated one and says so loudly.
func TestAutoBackendFallsBackLoudly(t *testing.T) {
	var logs bytes.Buffer
	defer func(f func() string) { gpuPresent = f }(gpuPresent)
	gpuPresent = func() string { return "" }
	b, err := OpenBackend("auto", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || b.Kind() != sim.Kind {
		t.Fatalf("auto = %v, %v", b, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "SIMULATED") {
		t.Fatalf("fallback was quiet: %q", logs.String())
	}
	// Where a GPU shows, auto never picks the test double.
	gpuPresent = func() string { return "/dev/nvidia0" }
	if _, err := OpenBackend("auto", slog.Default()); err == nil || !strings.Contains(err.Error(), "/dev/nvidia0 exists") {
		t.Fatalf("auto with a GPU present but no cuda backend: %v", err)
	}
	if b, err := OpenBackend("simulated", slog.Default()); err != nil || b.Kind() != sim.Kind {
		t.Fatalf("simulated asked by name: %v", err)
	}
	if _, err := OpenBackend("gpu", slog.Default()); err == nil || !strings.Contains(err.Error(), "auto, cuda or simulated") {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := OpenBackend("cuda", slog.Default()); err == nil {
		t.Fatal("cuda opened without a cuda backend registered")
	}
}

func TestTierAdmission(t *testing.T) {
	s, _ := newServer(t)
	claims := func(tier string, gpus ...int) sessiontoken.Claims {
		c := sessiontoken.Claims{Tier: tier}
		for _, g := range gpus {
			c.GPUs = append(c.GPUs, sim.UUID(g))
		}
		return c
	}
	busy := func(err error) bool {
		var r *refusal
		return errors.As(err, &r) && r.code == errDeviceUnavailable
	}
	shared := claims(sessiontoken.TierShared, 0)
	if err := s.admit(shared); err != nil {
		t.Fatal(err)
	}
	if err := s.admit(shared); err != nil {
		t.Fatalf("second shared session: %v", err)
	}
	if err := s.admit(claims(sessiontoken.TierDedicated, 0)); !busy(err) {
		t.Fatalf("dedicated on a shared GPU: %v", err)
	}
	ded := claims(sessiontoken.TierDedicated, 1)
	if err := s.admit(ded); err != nil {
		t.Fatalf("dedicated on the free GPU: %v", err)
	}
	if err := s.admit(claims(sessiontoken.TierShared, 0, 1)); !busy(err) {
		t.Fatalf("shared spanning a dedicated GPU: %v", err)
	}
	s.release(ded)
	if err := s.admit(claims(sessiontoken.TierDedicated, 1)); err != nil {
		t.Fatalf("dedicated after release: %v", err)
	}
	// A dedicated GPU is its instance's: another process of that VM gets a session on it, another
	// instance's does not.
	vm := claims(sessiontoken.TierDedicated, 2)
	vm.InstanceID = "inst-a"
	for i := range 2 {
		if err := s.admit(vm); err != nil {
			t.Fatalf("session %d of the dedicated GPU's instance: %v", i+1, err)
		}
	}
	other := vm
	other.InstanceID = "inst-b"
	if err := s.admit(other); !busy(err) {
		t.Fatalf("another instance on a dedicated GPU: %v", err)
	}
	s.release(vm)
	if err := s.admit(other); !busy(err) {
		t.Fatalf("another instance while the owner still has a session: %v", err)
	}
	s.release(vm)
	if err := s.admit(other); err != nil {
		t.Fatalf("another instance once the owner's sessions ended: %v", err)
	}
	if _, err := s.ordinals([]string{sim.UUID(1), "GPU-nope"}); err == nil || !strings.Contains(err.Error(), "GPU-nope") {
		t.Fatalf("unknown GPU: %v", err)
	}
}

func TestUsageEndpoint(t *testing.T) {
	s, _ := newServer(t)
	start := time.Now()
	for _, sid := range []string{"a", "b"} {
		se := &session{claims: sessiontoken.Claims{SessionID: sid, TenantID: "t", GPUs: []string{sim.UUID(0)},
			Tier: sessiontoken.TierShared, MemoryQuota: 1 << 20}, start: start}
		se.last.MemoryPeakBytes = 4096
		if err := s.record(se, start.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	h := s.Handler()
	get := func(path string) (*httptest.ResponseRecorder, []api.UsageRecord) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+s.AdminToken())
		h.ServeHTTP(rec, req)
		var page struct{ Records []api.UsageRecord }
		json.Unmarshal(rec.Body.Bytes(), &page)
		return rec, page.Records
	}
	_, all := get("/usage")
	if len(all) != 2 || all[0].ID != "gs1/a/1" || all[1].ID != "gs1/b/2" || all[0].GPUModel != "Simulated GPU (test double)" ||
		all[0].MemoryPeakBytes != 4096 || all[0].End.Sub(all[0].Start) != time.Minute {
		t.Fatalf("records %+v", all)
	}
	if _, after := get("/usage?after=gs1/a/1"); len(after) != 1 || after[0].SessionID != "b" {
		t.Fatalf("after a: %+v", after)
	}
	if rec, _ := get("/usage?after=nope"); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "unknown usage record id") {
		t.Fatalf("unknown after: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := get("/metrics"); !strings.Contains(rec.Body.String(), "gpuserverd_usage_records_total 2") {
		t.Fatalf("metrics: %s", rec.Body)
	}
	if rec, _ := get("/healthz"); rec.Code != 200 {
		t.Fatalf("healthz %d", rec.Code)
	}
	// Without the admin token nothing but /healthz answers (issue 13, finding 7).
	for _, path := range []string{"/usage", "/metrics"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer "} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusUnauthorized || strings.Contains(rec.Body.String(), "gs1/") {
				t.Fatalf("GET %s with %q: %d %s, want 401 and no records", path, auth, rec.Code, rec.Body)
			}
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz without a token: %d", rec.Code)
	}
}

var _ backend.Backend = (*sim.Backend)(nil)

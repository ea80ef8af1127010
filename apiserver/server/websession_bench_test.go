package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkAuth compares what a console request costs (session cookie) with an API-key request,
// both GET /v1/me through the whole handler chain on real PostgreSQL, and prices a sign-in
// (bcrypt). Results: docs/benchmarks/web-sessions.md.
func BenchmarkAuth(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, srv, u, apiKey := operatorServer(ctx, b)
	if err := st.SetPassword(ctx, u, "benchmark password"); err != nil {
		b.Fatal(err)
	}
	ws, err := st.CreateWebSession(ctx, u, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	run := func(b *testing.B, req func() *http.Request, want int) {
		for i := 0; i < b.N; i++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req())
			if w.Code != want {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.Run("bearer", func(b *testing.B) {
		run(b, func() *http.Request {
			r := httptest.NewRequest("GET", "/v1/me", nil)
			r.Header.Set("Authorization", "Bearer "+apiKey)
			return r
		}, 200)
	})
	b.Run("cookie", func(b *testing.B) {
		run(b, func() *http.Request {
			r := httptest.NewRequest("GET", "/v1/me", nil)
			r.AddCookie(&http.Cookie{Name: "gpucloud_session", Value: ws.Secret})
			return r
		}, 200)
	})
	b.Run("sign-in", func(b *testing.B) {
		run(b, func() *http.Request {
			r := httptest.NewRequest("POST", "/v1/session", strings.NewReader(`{"email":"op@example.com","password":"benchmark password"}`))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, 201)
	})
}

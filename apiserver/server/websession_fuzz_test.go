package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
)

// Session cookies and CSRF headers are attacker-controlled: only the exact session secret
// authenticates, only with its exact CSRF token for unsafe methods, and nothing is a 5xx.
func FuzzSessionCookie(f *testing.F) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, srv, u, _ := operatorServer(ctx, f)
	ws, err := st.CreateWebSession(ctx, u, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][2]string{{ws.Secret, ws.CSRFToken}, {ws.Secret, ""}, {ws.Secret[:len(ws.Secret)-1], ws.CSRFToken},
		{"gcs_", ""}, {"", ws.CSRFToken}, {ws.Secret + "x", ws.CSRFToken}, {"gcu_" + ws.Secret[4:], ws.CSRFToken}, {"\"gcs_a\"", "a"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, cookie, csrf string) {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			path := map[string]string{http.MethodGet: "/v1/me", http.MethodPut: "/v1/tiers/shared"}[method]
			req := httptest.NewRequest(method, path, nil)
			if method == http.MethodPut {
				req.Body = http.NoBody // an authenticated PUT is refused for its empty body (400), after auth
			}
			req.Header.Set("Cookie", "gpucloud_session="+cookie)
			req.Header.Set("X-CSRF-Token", csrf)
			w := httptest.NewRecorder()
			srv.Handler().ServeHTTP(w, req)
			got := w.Code
			valid := cookie == ws.Secret
			switch {
			case got >= 500:
				t.Fatalf("%s with cookie %q: %d %s", method, cookie, got, w.Body)
			case !valid && got != http.StatusUnauthorized:
				// A cookie the parser drops entirely reads as "no cookie", which is a 401 too.
				t.Fatalf("%s with a wrong cookie %q: %d", method, cookie, got)
			case valid && method == http.MethodGet && got != http.StatusOK:
				t.Fatalf("GET with the session: %d", got)
			case valid && method == http.MethodPut && (csrf == ws.CSRFToken) != (got == http.StatusBadRequest):
				t.Fatalf("PUT with csrf %q: %d %s", csrf, got, w.Body)
			}
		}
	})
}

// operatorServer is a server on a fresh database with one operator, for the session tests that
// need only a signed-in user.
func operatorServer(ctx context.Context, tb testing.TB) (*store.Store, *server.Server, store.User, string) {
	tb.Helper()
	st, err := store.Open(ctx, pgtest.NewDatabase(tb), 4)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srv, err := server.New(server.Options{Store: st, TokenKey: key})
	if err != nil {
		tb.Fatal(err)
	}
	u, apiKey, err := app.Bootstrap(ctx, st, "op@example.com", authn.RoleOperator)
	if err != nil {
		tb.Fatal(err)
	}
	return st, srv, u, apiKey
}

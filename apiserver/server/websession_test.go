package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// browser is a cookie-carrying client, like the console's fetch calls.
type browser struct {
	t       *testing.T
	e       *env
	cookies map[string]string
}

func (b *browser) do(method, path, body, csrf string) (int, string) {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, b.e.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	for k, v := range b.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.MaxAge < 0 {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c.Value
		}
	}
	return resp.StatusCode, string(raw)
}

func setPassword(t *testing.T, e *env, email, pw string) store.User {
	t.Helper()
	ctx := authn.WithPrincipal(context.Background(), authn.Principal{Role: "bootstrap"})
	var u store.User
	if err := e.st.ORM.WithContext(ctx).Where("email = ?", email).First(&u).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetPassword(ctx, u, pw); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestWebSessionSignInCSRFAndSignOut(t *testing.T) {
	e := newEnv(t)
	admin := setPassword(t, e, "admin@a.example", "correct horse battery")
	b := &browser{t: t, e: e, cookies: map[string]string{}}

	if st, body := b.do("POST", "/v1/session", `{"email":"admin@a.example","password":"wrong password!"}`, ""); st != 400 || !strings.Contains(body, `"field":"password"`) {
		t.Fatalf("wrong password: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v1/session", `{"email":"nobody@a.example","password":"correct horse battery"}`, ""); st != 400 || !strings.Contains(body, "wrong e-mail or password") {
		t.Fatalf("unknown e-mail: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v1/session", `{"email":"","password":""}`, ""); st != 400 || !strings.Contains(body, `"field":"email"`) || !strings.Contains(body, `"field":"password"`) {
		t.Fatalf("empty sign-in: %d %s", st, body)
	}
	if len(b.cookies) != 0 {
		t.Fatalf("failed sign-ins set cookies: %v", b.cookies)
	}
	// A form post (what another site could make a browser send) is refused.
	req, _ := http.NewRequest("POST", e.url+"/v1/session", strings.NewReader("email=admin%40a.example&password=correct+horse+battery"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("form sign-in: %v %v", resp, err)
	}

	st, body := b.do("POST", "/v1/session", `{"email":"Admin@A.example","password":"correct horse battery"}`, "")
	if st != 201 || b.cookies["gpucloud_session"] == "" || b.cookies["gpucloud_csrf"] == "" {
		t.Fatalf("sign in: %d %s cookies %v", st, body, b.cookies)
	}
	csrf := b.cookies["gpucloud_csrf"]
	if !strings.Contains(body, csrf) || !strings.Contains(body, admin.ID.String()) {
		t.Fatalf("session body lacks csrf token or user: %s", body)
	}
	if st, body := b.do("GET", "/v1/me", "", ""); st != 200 || !strings.Contains(body, `"role":"tenant-admin"`) || !strings.Contains(body, e.tenantA.ID) {
		t.Fatalf("me by cookie: %d %s", st, body)
	}
	// Safe methods need no token; unsafe ones need the right one.
	create := `{"name":"web-vm","instance_type_id":"` + e.cpuType + `","image":"ubuntu-24.04"}`
	e.host("h1", 64, 1<<20)
	if st, body := b.do("POST", "/v1/instances", create, ""); st != 403 || !strings.Contains(body, "X-CSRF-Token") {
		t.Fatalf("unsafe without token: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v1/instances", create, "not-the-token"); st != 403 {
		t.Fatalf("unsafe with a wrong token: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v1/instances", create, csrf); st != 201 {
		t.Fatalf("unsafe with the token: %d %s", st, body)
	}
	// The cookie identifies tenant A only: tenant B's data stays invisible.
	if st, _ := b.do("GET", "/v1/tenants/"+e.tenantB.ID, "", ""); st != 404 {
		t.Fatalf("tenant B through A's session: %d", st)
	}
	// A bearer key wins over the cookie (no mixing of identities).
	req, _ = http.NewRequest("GET", e.url+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+e.tenantB.Key)
	req.AddCookie(&http.Cookie{Name: "gpucloud_session", Value: b.cookies["gpucloud_session"]})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), e.tenantB.ID) {
		t.Fatalf("bearer plus cookie: %s", raw)
	}

	if st, _ := b.do("DELETE", "/v1/session", "", ""); st != 403 {
		t.Fatalf("sign-out without token: %d", st)
	}
	session := b.cookies["gpucloud_session"]
	if st, _ := b.do("DELETE", "/v1/session", "", csrf); st != 204 || b.cookies["gpucloud_session"] != "" {
		t.Fatalf("sign-out: %d cookies %v", st, b.cookies)
	}
	b.cookies["gpucloud_session"] = session // a stolen, signed-out cookie is dead
	if st, _ := b.do("GET", "/v1/me", "", ""); st != 401 {
		t.Fatalf("signed-out session still works: %d", st)
	}
	b.cookies["gpucloud_session"] = "gcs_forged"
	if st, _ := b.do("GET", "/v1/me", "", ""); st != 401 {
		t.Fatalf("forged session: %d", st)
	}
}

func TestSetPassword(t *testing.T) {
	e := newEnv(t)
	admin := setPassword(t, e, "admin@a.example", "first password")
	var bAdmin store.User
	if err := e.st.ORM.Where("email = ?", "admin@b.example").First(&bAdmin).Error; err != nil {
		t.Fatal(err)
	}
	path := "/v1/users/" + admin.ID.String() + "/password"
	// Changing one's own password needs the current one.
	status, _, body := e.call("PUT", path, e.tenantA.Key, map[string]string{"new_password": "second password"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"current_password"`) {
		t.Fatalf("without current: %d %s", status, body)
	}
	status, _, body = e.call("PUT", path, e.tenantA.Key, map[string]string{"current_password": "first password", "new_password": "short"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"new_password"`) {
		t.Fatalf("short password: %d %s", status, body)
	}
	e.must(204, "PUT", path, e.tenantA.Key, map[string]string{"current_password": "first password", "new_password": "second password"}, nil)
	if _, err := e.st.CheckPassword(context.Background(), "admin@a.example", "first password"); err == nil {
		t.Fatal("old password still accepted")
	}
	if u, err := e.st.CheckPassword(context.Background(), "admin@a.example", "second password"); err != nil || u.ID != admin.ID {
		t.Fatalf("new password: %v %v", u, err)
	}
	// Another tenant's admin cannot see, let alone set, this user's password; operators can.
	e.must(404, "PUT", path, e.tenantB.Key, map[string]string{"new_password": "hijacked password"}, nil)
	e.must(204, "PUT", "/v1/users/"+bAdmin.ID.String()+"/password", e.operator, map[string]string{"new_password": "operator set this"}, nil)
	if _, err := e.st.CheckPassword(context.Background(), "admin@b.example", "operator set this"); err != nil {
		t.Fatal(err)
	}
	e.must(404, "PUT", "/v1/users/"+uuid.NewString()+"/password", e.operator, map[string]string{"new_password": "nobody's password"}, nil)
	if _, err := e.st.CheckPassword(context.Background(), "admin@a.example", "hijacked password"); err == nil {
		t.Fatal("tenant B changed tenant A's password")
	}
}

// The console is served from the binary with a strict content security policy, and nothing
// outside its embedded tree is reachable through it.
func TestConsoleIsServed(t *testing.T) {
	e := newEnv(t)
	get := func(path string) (int, http.Header, string) {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(raw)
	}
	st, hdr, body := get("/")
	if st != 200 || !strings.Contains(body, `src="/console/js/main.js"`) || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %v %.200s", st, hdr, body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("CSP %q", csp)
	}
	if st, hdr, body := get("/console/js/main.js"); st != 200 || !strings.Contains(hdr.Get("Content-Type"), "javascript") || !strings.Contains(body, "export async function route") {
		t.Fatalf("main.js: %d %v", st, hdr)
	}
	if st, _, body := get("/console/js/"); st != 404 || strings.Contains(body, "main.js") {
		t.Fatalf("directory listing: %d %.200s", st, body)
	}
	// Anything that is not one of its files is the API's problem+json 404, like any unknown path.
	for _, p := range []string{"/console/%2e%2e/", "/console/%2e%2e/embed.go", "/console/..%2f..%2fgo.mod",
		"/console/js/%2e%2e/index.html", "/console/nope.js", "/console/", "/console/js"} {
		st, hdr, body := get(p)
		if st != 404 || hdr.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %.100s, want a problem+json 404", p, st, hdr.Get("Content-Type"), body)
		}
	}
	// The API is unchanged beside it: unknown API routes are still problems, not the console.
	if st, hdr, _ := get("/v1/nope"); st != 404 || hdr.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("/v1/nope: %d %v", st, hdr)
	}
}

// Ten wrong passwords lock that e-mail's sign-in for a while, even with the right password then;
// other users are unaffected.
func TestSignInThrottle(t *testing.T) {
	e := newEnv(t)
	setPassword(t, e, "admin@a.example", "correct horse battery")
	setPassword(t, e, "admin@b.example", "another good password")
	b := &browser{t: t, e: e, cookies: map[string]string{}}
	for i := 0; i < 10; i++ {
		if st, body := b.do("POST", "/v1/session", `{"email":"admin@a.example","password":"guess `+string(rune('a'+i))+`"}`, ""); st != 400 {
			t.Fatalf("guess %d: %d %s", i, st, body)
		}
	}
	st, body := b.do("POST", "/v1/session", `{"email":"ADMIN@a.example","password":"correct horse battery"}`, "")
	if st != 429 || !strings.Contains(body, "too-many-sign-ins") || b.cookies["gpucloud_session"] != "" {
		t.Fatalf("after 10 wrong passwords: %d %s", st, body)
	}
	if st, body := b.do("POST", "/v1/session", `{"email":"admin@b.example","password":"another good password"}`, ""); st != 201 {
		t.Fatalf("another user: %d %s", st, body)
	}
}

// An attacker's wrong passwords from one address do not lock the owner out from another; behind
// a trusted proxy the address is the one X-Forwarded-For names, and without one the header is
// ignored (a client cannot rotate it to escape throttling).
func TestSignInThrottleBySource(t *testing.T) {
	signIn := func(e *env, from, email, pw string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", e.url+"/v1/session", strings.NewReader(`{"email":"`+email+`","password":"`+pw+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", from)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	e := newEnv(t, envOpts{opts: server.Options{TrustedProxies: []string{"127.0.0.1"}}})
	setPassword(t, e, "admin@a.example", "correct horse battery")
	for i := 0; i < 10; i++ {
		if st := signIn(e, "203.0.113.9", "admin@a.example", "guess"); st != 400 {
			t.Fatalf("guess %d: %d", i, st)
		}
	}
	if st := signIn(e, "203.0.113.9", "admin@a.example", "correct horse battery"); st != 429 {
		t.Fatalf("the attacker's 11th try: %d, want 429", st)
	}
	if st := signIn(e, "198.51.100.7", "admin@a.example", "correct horse battery"); st != 201 {
		t.Fatalf("the owner from another address after the attacker's failures: %d, want 201", st)
	}

	// No trusted proxy: every request is from 127.0.0.1 whatever the header says.
	e = newEnv(t)
	setPassword(t, e, "admin@a.example", "correct horse battery")
	for i := 0; i < 10; i++ {
		signIn(e, fmt.Sprintf("203.0.113.%d", i), "admin@a.example", "guess")
	}
	if st := signIn(e, "192.0.2.1", "admin@a.example", "correct horse battery"); st != 429 {
		t.Fatalf("a forged X-Forwarded-For escaped throttling: %d, want 429", st)
	}
}

package hostile

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// post sends an admin POST with auth ("" for none).
func (s *server) post(path, auth, body string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.admin+path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The mobility routes (issue 18) answer only with the admin token: a tenant must not list
// others' sessions, checkpoint them into files or move them.
func TestMobilityAdminNeedsToken(t *testing.T) {
	s := start(t)
	c, r := s.hello(s.token("inst-m", sessiontoken.TierShared, 1<<20))
	if r.Result != 0 {
		t.Fatal(r.Message)
	}
	defer c.conn.Close()
	for _, auth := range []string{"", "Bearer not-the-token"} {
		if code, body := s.get("/admin/sessions", auth); code != 401 || strings.Contains(body, "inst-m") {
			t.Fatalf("GET /admin/sessions with %q: %d %s", auth, code, body)
		}
		for _, path := range []string{"/admin/sessions/inst-m/checkpoint", "/admin/sessions/inst-m/migrate", "/admin/restore"} {
			if code, _ := s.post(path, auth, `{"target":"127.0.0.1:1","token":"x","path":"/etc/passwd"}`); code != 401 {
				t.Fatalf("POST %s with %q: %d, want 401", path, auth, code)
			}
		}
	}
	if code, body := s.get("/admin/sessions", s.adminAuth()); code != 200 || !strings.Contains(body, `"session_id":"inst-m"`) {
		t.Fatalf("GET /admin/sessions with the token: %d %s", code, body)
	}
	// Even with the token, a restore reads only checkpoints of this server's own.
	if code, body := s.post("/admin/restore", s.adminAuth(), `{"path":"/etc/passwd","token":"x"}`); code != 400 || !strings.Contains(body, "want a checkpoint in") {
		t.Fatalf("restore of a file outside the checkpoints: %d %s", code, body)
	}
	if code, body := s.post("/admin/sessions/inst-m/migrate", s.adminAuth(), `{"target":"127.0.0.1:1","tokn":"x"}`); code != 400 || !strings.Contains(body, "tokn") {
		t.Fatalf("migrate with an unknown field: %d %s", code, body)
	}
}

// A MigrateIn is a handshake like a Hello: without a valid token for this server naming the
// session it moves, it is refused and no worker starts.
func TestMigrateInWithoutAValidTokenIsRefused(t *testing.T) {
	s := start(t)
	for name, m := range map[string]*wire.MigrateIn{
		"forged":        {Version: wire.Version, Token: "forged", SessionID: "inst-x"},
		"other session": {Version: wire.Version, Token: s.token("inst-y", sessiontoken.TierShared, 1<<20), SessionID: "inst-x"},
		"old version":   {Version: wire.Version + 7, Token: s.token("inst-x", sessiontoken.TierShared, 1<<20), SessionID: "inst-x"},
	} {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(wire.AppendFrame(nil, m, 0, 0))
		h, p, err := wire.ReadFrame(conn, nil)
		var r wire.MigrateInReply
		if err != nil || h.Type != wire.TypeMigrateInReply || r.Decode(p) != nil || r.Result == 0 {
			t.Fatalf("%s: %v %+v %v", name, h.Type, r, err)
		}
		conn.Close()
	}
	waitWorkers(t, s, 0)
}

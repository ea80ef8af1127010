package hostile

import (
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestAdminNeedsToken is issue 13's finding 7: the admin port's usage records and metrics
// answer only with the admin token (here the one gpuserverd generated into its data dir);
// /healthz stays open for liveness probes.
func TestAdminNeedsToken(t *testing.T) {
	s := start(t)
	c, r := s.hello(s.token("inst-u", sessiontoken.TierShared, 1<<20))
	if r.Result != 0 {
		t.Fatal(r.Message)
	}
	c.conn.Close()
	waitWorkers(t, s, 0)
	for _, path := range []string{"/usage", "/metrics"} {
		for _, auth := range []string{"", "Bearer ", "Bearer not-the-token", "Basic YWRtaW46YWRtaW4="} {
			if code, body := s.get(path, auth); code != 401 || strings.Contains(body, "inst-u") {
				t.Fatalf("GET %s with %q: %d %s, want 401", path, auth, code, body)
			}
		}
	}
	if code, body := s.get("/usage", s.adminAuth()); code != 200 || !strings.Contains(body, "inst-u") {
		t.Fatalf("GET /usage with the admin token: %d %s", code, body)
	}
	if code, _ := s.get("/healthz", ""); code != 200 {
		t.Fatalf("/healthz without a token: %d", code)
	}
}

package guesttest

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/internal/sessiontoken"
)

// post sends an admin POST with the server's admin token and returns the status and body.
func (s *gpuserverd) post(path string, body any) (int, string) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.admin+path, bytes.NewReader(b))
	tok, err := os.ReadFile(filepath.Join(s.dataDir, "admin-token"))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// twoServers starts two gpuserverd processes with one control plane's key, as two GPU servers:
// gs-test and gs-b.
func twoServers(t *testing.T) (a, b *gpuserverd) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	flags := []string{"--checkpoint-period", "100ms"}
	a = startServerOn(t, t.TempDir(), pub, priv, flags)
	b = startServerOn(t, t.TempDir(), pub, priv, append(flags, "--id", "gs-b"))
	return a, b
}

func onServerB(c *sessiontoken.Claims) { c.GPUServer = "gs-b" }

// Issue 18 (c): a program running through the guest library is moved, mid-run, from one
// gpuserverd to another by the admin API: it finishes with correct results, and its usage is
// billed once: the old server's records end where the new server's begin. Both servers serve the
// same simulated GPU on this host, so the memory is handed over between their workers (passed as
// file descriptors), unless the request asks to copy it through the connection.
func TestGuestKeepsRunningAcrossAMigration(t *testing.T) {
	for _, copyVia := range []string{"stream", ""} {
		t.Run("copy="+copyVia, func(t *testing.T) { testGuestAcrossAMigration(t, copyVia) })
	}
}

func testGuestAcrossAMigration(t *testing.T, copyVia string) {
	t.Setenv("GPUSERVERD_HANDOVER", "1") // the servers' workers inherit it: "" copy hands over
	a, b := twoServers(t)
	prog := a.client(a.token("s-mig", sessiontoken.TierShared, 64<<20), "steady", "60", "30")
	prog.Env = append(prog.Env, "GPUCLOUD_DEBUG=1", "GPUCLOUD_LANES=4") // says when lanes open
	var stderr bytes.Buffer
	out := startSteady(t, prog, &stderr)
	running := time.Now()
	time.Sleep(300 * time.Millisecond)

	code, body := a.post("/admin/sessions/s-mig/migrate", map[string]string{
		"target": b.addr, "token": b.token("s-mig", sessiontoken.TierShared, 64<<20, onServerB), "copy": copyVia})
	if code != 200 {
		t.Fatalf("migrate: %d %s", code, body)
	}
	var res struct {
		Migration struct {
			State       string  `json:"state"`
			Via         string  `json:"via"`
			CopiedBytes uint64  `json:"copied_bytes"`
			HandedBytes uint64  `json:"handed_bytes"`
			PauseMs     float64 `json:"pause_ms"`
		} `json:"migration"`
	}
	json.Unmarshal([]byte(body), &res)
	moved := res.Migration.CopiedBytes
	if want := cmp.Or(copyVia, "handover"); res.Migration.Via != want {
		t.Fatalf("migration went via %q, want %q: %s", res.Migration.Via, want, body)
	}
	if copyVia == "" {
		moved = res.Migration.HandedBytes
	}
	if res.Migration.State != "done" || moved < 3*(2<<20) {
		t.Fatalf("migration result %s", body)
	}
	t.Logf("migration: %s", body)

	rest, _ := io.ReadAll(out)
	err := prog.Wait()
	finished := time.Now()
	t.Logf("guest's stderr:\n%s", stderr.String())
	if err != nil || !strings.Contains(string(rest), "STEADY OK 60") {
		t.Fatalf("steady across a migration: %v %q", err, rest)
	}
	redirected := strings.Index(stderr.String(), "gpucloud: session moving to "+b.addr)
	if redirected < 0 {
		t.Fatal("the guest never followed the redirect")
	}
	// Its striped copies go on over lanes to the new server, opened again after the move.
	if !strings.Contains(stderr.String()[:redirected], "gpucloud: 4 lanes open") || !strings.Contains(stderr.String()[redirected:], "gpucloud: 4 lanes open") {
		t.Fatal("the guest did not open its lanes again on the new server")
	}
	for _, s := range []*gpuserverd{a, b} {
		waitFor(t, "the sessions' end", func() bool { return strings.Contains(s.get("/metrics"), "gpuserverd_sessions_active 0") })
	}
	recsA, _ := sessionRecords(t, a.usage(), "s-mig")
	recsB, _ := sessionRecords(t, b.usage(), "s-mig")
	if len(recsA) == 0 || len(recsB) == 0 {
		t.Fatalf("records: %d on the old server, %d on the new", len(recsA), len(recsB))
	}
	all := append(append([]api.UsageRecord(nil), recsA...), recsB...)
	var billed time.Duration
	for i, r := range all {
		if i > 0 && !r.Start.Equal(all[i-1].End) {
			t.Fatalf("record %s starts %v, the one before (%s) ended %v: a gap or an overlap", r.ID, r.Start, all[i-1].ID, all[i-1].End)
		}
		billed += r.End.Sub(r.Start)
	}
	for _, r := range recsB {
		if r.Source != "gs-b" {
			t.Fatalf("a record of the new server from %q", r.Source)
		}
	}
	first, last := all[0], all[len(all)-1]
	if first.Start.After(running) || last.End.Before(finished.Add(-time.Second)) || last.End.After(finished.Add(time.Second)) {
		t.Fatalf("billed %v from %v to %v; it ran from before %v to about %v", billed, first.Start, last.End, running, finished)
	}
}

// The admin API refuses what it cannot do, naming why, and the session runs on untouched.
func TestMigrateRefusals(t *testing.T) {
	a, b := twoServers(t)
	_, r, send := hold(t, a, a.token("s-stay", sessiontoken.TierShared, 64<<20), "8")
	for _, c := range []struct {
		path string
		body map[string]string
		want string
	}{
		{"/admin/sessions/s-none/migrate", map[string]string{"target": b.addr, "token": "x"}, "no such session"},
		{"/admin/sessions/s-stay/migrate", map[string]string{"token": "x"}, "target"},
		{"/admin/sessions/s-stay/migrate", map[string]string{"target": b.addr, "token": "x", "copy": "rdma"}, `copy \"rdma\"`},
		{"/admin/sessions/s-stay/migrate", map[string]string{"target": b.addr, "token": "forged"}, "session token refused"},
		// A token for the other server's id but another session: refused by the target.
		{"/admin/sessions/s-stay/migrate", map[string]string{"target": b.addr,
			"token": b.token("s-other", sessiontoken.TierShared, 64<<20, onServerB)}, "the token is for session"},
		// A token for the old server is not one for the new.
		{"/admin/sessions/s-stay/migrate", map[string]string{"target": b.addr,
			"token": a.token("s-stay", sessiontoken.TierShared, 64<<20)}, "session token refused"},
	} {
		code, body := a.post(c.path, c.body)
		if code == 200 || !strings.Contains(body, c.want) {
			t.Errorf("%s %v: %d %s, want a refusal naming %q", c.path, c.body, code, body, c.want)
		}
	}
	// A session its worker cannot move (its guest did not ask to resume) is a conflict the
	// operator can act on (409), named by the worker, not a failure on the way (502).
	cmd := a.client(a.token("s-fixed", sessiontoken.TierShared, 64<<20), "probe", "hold", "1")
	cmd.Env = append(cmd.Env, "GPUCLOUD_RESUME_S=0")
	_, _, sendFixed := startHold(t, cmd)
	code, body := a.post("/admin/sessions/s-fixed/migrate", map[string]string{"target": b.addr,
		"token": b.token("s-fixed", sessiontoken.TierShared, 64<<20, onServerB)})
	if code != http.StatusConflict || !strings.Contains(body, "did not ask to resume") {
		t.Errorf("migrating a session that cannot move: %d %s, want 409 naming why", code, body)
	}
	sendFixed("go\n")
	send("go\n")
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("the session after refused migrations: %q", line)
	}
	if !strings.Contains(b.get("/metrics"), "gpuserverd_sessions_active 0") {
		t.Fatal("a refused migration left a session on the target")
	}
}

// Issue 18's checkpoint and restore: a running program's session is checkpointed and stopped
// through the admin API, then restored from the checkpoint into a fresh worker; the guest,
// resuming meanwhile, finds the restored session and the program finishes with correct results.
// The stopped time is billed to nobody: the records before the stop and after the restore do
// not overlap.
func TestGuestKeepsRunningAcrossCheckpointAndRestore(t *testing.T) {
	a, _ := twoServers(t)
	tok := a.token("s-ckpt", sessiontoken.TierShared, 64<<20)
	prog := a.client(tok, "steady", "40", "30")
	var stderr bytes.Buffer
	out := startSteady(t, prog, &stderr)
	time.Sleep(200 * time.Millisecond)

	code, body := a.post("/admin/sessions/s-ckpt/checkpoint", map[string]bool{"stop": true})
	if code != 200 {
		t.Fatalf("checkpoint: %d %s", code, body)
	}
	var ck struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	json.Unmarshal([]byte(body), &ck)
	if ck.Bytes < 3*(2<<20) {
		t.Fatalf("checkpoint of %d bytes, want the three 2 MiB vectors at least: %s", ck.Bytes, body)
	}
	stopped := time.Now()
	time.Sleep(500 * time.Millisecond) // the program waits, resuming
	if code, body := a.post("/admin/restore", map[string]string{"path": ck.Path, "token": tok}); code != 202 {
		t.Fatalf("restore: %d %s", code, body)
	}
	restored := time.Now()

	rest, _ := io.ReadAll(out)
	err := prog.Wait()
	t.Logf("guest's stderr:\n%s", stderr.String())
	if err != nil || !strings.Contains(string(rest), "STEADY OK 40") {
		t.Fatalf("steady across a checkpoint and restore: %v %q", err, rest)
	}
	waitFor(t, "the sessions' end", func() bool { return strings.Contains(a.get("/metrics"), "gpuserverd_sessions_active 0") })
	var recs []api.UsageRecord
	for _, r := range a.usage() {
		if r.SessionID == "s-ckpt" {
			recs = append(recs, r)
		}
	}
	// The two workers append their records as they go, so the old one's last record may come
	// after the restored one's first: compare them in time order.
	sort.Slice(recs, func(i, j int) bool { return recs[i].Start.Before(recs[j].Start) })
	var gap time.Duration
	for i := 1; i < len(recs); i++ {
		d := recs[i].Start.Sub(recs[i-1].End)
		if d < 0 {
			t.Fatalf("record %s overlaps the one before: %v < %v", recs[i].ID, recs[i].Start, recs[i-1].End)
		}
		gap += d
	}
	if want := restored.Sub(stopped); gap < want-100*time.Millisecond || gap > want+time.Second {
		t.Fatalf("unbilled gap %v; the session was stopped for about %v", gap, want)
	}
}

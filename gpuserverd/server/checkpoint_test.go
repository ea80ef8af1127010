package server

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/usage"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// openTestSession registers a session as runWorker does, without a worker process.
func openTestSession(s *Server, pid int, sid string, start time.Time) *session {
	se := &session{claims: sessiontoken.Claims{SessionID: sid, TenantID: "t-" + sid, InstanceID: "i-" + sid,
		GPUs: []string{sim.UUID(0)}, Tier: sessiontoken.TierShared}, pid: pid, start: start, billedTo: start}
	s.mu.Lock()
	s.sessions[pid] = se
	s.mu.Unlock()
	return se
}

// endTestSession is runWorker's ending, without a worker process.
func endTestSession(t *testing.T, s *Server, se *session, end time.Time) {
	t.Helper()
	s.mu.Lock()
	delete(s.sessions, se.pid)
	s.mu.Unlock()
	if err := s.endUsage(se, end); err != nil {
		t.Fatal(err)
	}
}

// billed sums, per session, the seconds its records cover, failing on any gap or overlap.
func billed(t *testing.T, s *Server) map[string]time.Duration {
	t.Helper()
	recs, err := s.usage.After("")
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]time.Duration{}
	last := map[string]time.Time{}
	ids := map[string]bool{}
	for _, r := range recs {
		if ids[r.ID] {
			t.Fatalf("id %s twice", r.ID)
		}
		ids[r.ID] = true
		if l, ok := last[r.SessionID]; ok && !r.Start.Equal(l) {
			t.Fatalf("session %s: record %s starts %v, previous ended %v", r.SessionID, r.ID, r.Start, l)
		}
		if r.TenantID != "t-"+r.SessionID {
			t.Fatalf("record %s billed to tenant %s", r.ID, r.TenantID)
		}
		last[r.SessionID] = r.End
		sum[r.SessionID] += r.End.Sub(r.Start)
	}
	return sum
}

func TestCheckpointsBillOpenSessionsWithoutOverlap(t *testing.T) {
	s, _ := newServer(t)
	t0 := time.Now().Truncate(time.Second)
	a := openTestSession(s, 101, "a", t0)
	if err := s.Checkpoint(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := openTestSession(s, 102, "b", t0.Add(12*time.Second))
	if err := s.Checkpoint(t0.Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	endTestSession(t, s, a, t0.Add(25*time.Second))
	// b's worker exits at 27 s, but a checkpoint stamped 28 s takes it first: its end bills
	// nothing more, never an interval running backwards.
	if err := s.Checkpoint(t0.Add(28 * time.Second)); err != nil {
		t.Fatal(err)
	}
	endTestSession(t, s, b, t0.Add(27*time.Second))
	// A checkpoint after both ended bills nothing more.
	if err := s.Checkpoint(t0.Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got := billed(t, s)
	if got["a"] != 25*time.Second || got["b"] != 16*time.Second || s.usage.Len() != 5 {
		t.Fatalf("billed %v in %d records; want a 25s (3 records), b 16s (2)", got, s.usage.Len())
	}
	// Nothing is left open, so a restart closes nothing.
	if open, err := s.readOpen(); err != nil || len(open) != 0 {
		t.Fatalf("after clean ends: open %v, %v", open, err)
	}
}

// A gpuserverd dropped mid-session (no end) keeps the checkpointed time; the next one on the same
// data dir closes the session, bills nothing twice, and counts it.
func TestRestartClosesSessionsCutMidway(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	cfg := Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"}, DataDir: dir, BackendKind: sim.Kind}
	s, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	openTestSession(s, 101, "a", t0)
	openTestSession(s, 102, "b", t0.Add(time.Second)) // never checkpointed before the crash
	if err := s.Checkpoint(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(t0.Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	openTestSession(s, 103, "c", t0.Add(21*time.Second)) // started after the last checkpoint
	s.usage.Close()                                      // the crash: no session ends

	s2, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.usage.Close()
	got := billed(t, s2)
	if got["a"] != 20*time.Second || got["b"] != 19*time.Second || got["c"] != 0 {
		t.Fatalf("billed after restart %v; want a 20s, b 19s, c nothing", got)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s2.AdminToken())
	s2.Handler().ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), "gpuserverd_sessions_cut_total 2") {
		t.Fatalf("metrics after restart:\n%s", rec.Body)
	}
	// Closed once: a third start finds nothing open.
	if open, err := s2.readOpen(); err != nil || len(open) != 0 {
		t.Fatalf("second close: %v, %v", open, err)
	}
}

// Records are whole milliseconds, as billing counts them: a checkpoint less than a millisecond
// after the last record bills nothing (billing would refuse an empty interval), and the remainder
// joins the next record.
func TestRecordsAreWholeMilliseconds(t *testing.T) {
	s, _ := newServer(t)
	t0 := time.Now().Truncate(time.Second)
	se := openTestSession(s, 103, "ms", t0.Add(400*time.Millisecond+500*time.Microsecond))
	if err := s.Checkpoint(t0.Add(400*time.Millisecond + 900*time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	if s.usage.Len() != 0 {
		t.Fatalf("a checkpoint inside the session's first millisecond wrote %d records", s.usage.Len())
	}
	if err := s.Checkpoint(t0.Add(500*time.Millisecond + 300*time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	endTestSession(t, s, se, t0.Add(500*time.Millisecond+600*time.Microsecond))
	recs, err := s.usage.After("")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1 (the end's sub-millisecond remainder bills nothing)", len(recs))
	}
	r := recs[0]
	if !r.Start.Equal(t0.Add(400*time.Millisecond)) || !r.End.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("record %v..%v, want whole milliseconds %v..%v", r.Start, r.End,
			t0.Add(400*time.Millisecond), t0.Add(500*time.Millisecond))
	}
	billed(t, s) // contiguous, no overlap
}

// A worker whose session ended while no gpuserverd ran left its end time: the next gpuserverd
// bills the session to that end, not to the last checkpoint; an unreadable or earlier end bills
// nothing more.
func TestRestartBillsSessionsToTheirRecordedEnd(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	cfg := Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"}, DataDir: dir, BackendKind: sim.Kind}
	s, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	openTestSession(s, 101, "a", t0)
	openTestSession(s, 102, "b", t0)
	openTestSession(s, 103, "c", t0)
	if err := s.Checkpoint(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	s.usage.Close() // the crash; then the workers end with no server attached
	workers := s.adoptDir(workerChannel{})
	for pid, text := range map[int]string{
		101: t0.Add(15 * time.Second).Format(time.RFC3339Nano), // ended 5 s after the checkpoint
		102: "not a time",
		103: t0.Add(5 * time.Second).Format(time.RFC3339Nano), // before its last record
	} {
		if err := os.WriteFile(worker.EndedFile(workers, pid), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s2, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.usage.Close()
	got := billed(t, s2)
	if got["a"] != 15*time.Second || got["b"] != 10*time.Second || got["c"] != 10*time.Second {
		t.Fatalf("billed after restart %v; want a 15s (its recorded end), b and c 10s (their checkpoint)", got)
	}
	for _, pid := range []int{101, 102, 103} {
		if _, err := os.Stat(worker.EndedFile(workers, pid)); !os.IsNotExist(err) {
			t.Fatalf("end file of %d left behind: %v", pid, err)
		}
	}
}

// A server killed between a checkpoint's record and its rewrite of the state file left billed_to
// behind the record; the next server bills on from where the usage log says the session's
// records end. That record may lie past the log's first page (a long-lived server logs many
// records; the chaos test's server had 1157): the next server reads the whole log, and bills
// nothing twice.
func TestRestartReadsTheWholeUsageLog(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	cfg := Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"}, DataDir: dir, BackendKind: sim.Kind}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	// A full page of records of earlier sessions.
	var earlier bytes.Buffer
	for i := range usage.MaxPage {
		json.NewEncoder(&earlier).Encode(api.UsageRecord{ID: fmt.Sprintf("gs1/old/%d", i+1), Kind: api.UsageGPU, Source: "gs1",
			SessionID: "old", TenantID: "t-old", Start: t0.Add(-time.Hour), End: t0.Add(-time.Hour + time.Millisecond)})
	}
	if err := os.WriteFile(filepath.Join(dir, "usage.jsonl"), earlier.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	if s.usage.Len() != usage.MaxPage {
		t.Fatalf("the log holds %d records, want the %d written", s.usage.Len(), usage.MaxPage)
	}
	se := openTestSession(s, 101, "a", t0)
	if err := s.Checkpoint(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The next checkpoint's record is written; the server is killed before the state file is.
	s.ckptMu.Lock()
	err = s.record(se, t0.Add(12*time.Second))
	s.ckptMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s.usage.Close()
	// The worker ends with no server attached, leaving its end time.
	if err := os.WriteFile(worker.EndedFile(s.adoptDir(workerChannel{}), 101), []byte(t0.Add(15*time.Second).Format(time.RFC3339Nano)), 0o600); err != nil {
		t.Fatal(err)
	}

	s2, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.usage.Close()
	var recs []api.UsageRecord
	for after := ""; ; {
		page, err := s2.usage.After(after)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			if r.SessionID == "a" {
				recs = append(recs, r)
			}
		}
		after = page[len(page)-1].ID
	}
	var sum time.Duration
	for i, r := range recs {
		if i > 0 && !r.Start.Equal(recs[i-1].End) {
			t.Fatalf("record %s starts %v, the one before ended %v: billed twice or not at all", r.ID, r.Start, recs[i-1].End)
		}
		sum += r.End.Sub(r.Start)
	}
	if sum != 15*time.Second {
		t.Fatalf("session billed %v in %d records, want the 15 s it ran", sum, len(recs))
	}
}

// A server bills a running session only as far as its worker's reports allow: while it moves, up
// to the last report's time, never past a move's pause (until the move fails) nor past the moment the
// guest's stream broke (until it resumes), and a restored session not before its guest arrives.
// Without these limits the chaos test billed the same time on two servers: a gpuserverd that
// adopted a worker mid-move billed past the pause, and a worker whose guest had died lingered,
// billed, beside the next program's session.
func TestCheckpointsBillOnlyWhatTheWorkerReported(t *testing.T) {
	s, _ := newServer(t)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	report := func(se *session, snap worker.Snapshot) {
		se.mu.Lock()
		se.last = snap
		se.mu.Unlock()
	}
	checkpoint := func(d time.Duration) {
		t.Helper()
		if err := s.Checkpoint(at(d)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(step string, w map[string]time.Duration) {
		t.Helper()
		got := billed(t, s)
		for sid, d := range w {
			if got[sid] != d*time.Second {
				t.Fatalf("%s: session %s billed %v, want %v (all: %v)", step, sid, got[sid], d*time.Second, got)
			}
		}
	}
	moved := openTestSession(s, 101, "moved", t0)       // its move pauses, fails, then succeeds
	gone := openTestSession(s, 102, "gone", t0)         // its guest dies
	blip := openTestSession(s, 103, "blip", t0)         // its guest comes back
	restored := openTestSession(s, 104, "restored", t0) // a migration's target
	restored.incoming = true

	moving := func(state string) *worker.MigrationProgress {
		return &worker.MigrationProgress{Target: "b:1", State: state}
	}
	steady := openTestSession(s, 105, "steady", t0) // reports once a second, no move: billed to the tick
	report(steady, worker.Snapshot{At: at(5)})
	report(moved, worker.Snapshot{At: at(5), Migration: moving("precopy")})
	report(gone, worker.Snapshot{At: at(10), AwaySince: at(4)})
	report(blip, worker.Snapshot{At: at(10), AwaySince: at(4)})
	report(restored, worker.Snapshot{At: at(10), BillFrom: at(3), AwaySince: at(3)})
	checkpoint(10)
	want("first checkpoint", map[string]time.Duration{"moved": 5, "gone": 4, "blip": 4, "restored": 0, "steady": 10})

	report(moved, worker.Snapshot{At: at(20), PausedAt: at(12), Migration: moving("paused")})
	report(blip, worker.Snapshot{At: at(20)})
	report(restored, worker.Snapshot{At: at(20), BillFrom: at(3)})
	checkpoint(21)
	want("paused, back, arrived", map[string]time.Duration{"moved": 12, "gone": 4, "blip": 21, "restored": 18, "steady": 21})

	report(moved, worker.Snapshot{At: at(29), Migration: moving("failed")}) // it ran on here
	checkpoint(30)
	want("move failed", map[string]time.Duration{"moved": 30})

	report(moved, worker.Snapshot{At: at(40), PausedAt: at(33), HandedOff: at(33), Migration: moving("done")})
	report(gone, worker.Snapshot{At: at(45), AwaySince: at(4)})
	endTestSession(t, s, moved, at(41))
	endTestSession(t, s, gone, at(45)) // its resume window ran out
	want("ended", map[string]time.Duration{"moved": 33, "gone": 4})
}

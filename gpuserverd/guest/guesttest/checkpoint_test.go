package guesttest

import (
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/internal/sessiontoken"
)

// sessionRecords returns sid's records, failing unless each starts where the one before ended.
func sessionRecords(t *testing.T, recs []api.UsageRecord, sid string) ([]api.UsageRecord, time.Duration) {
	t.Helper()
	var out []api.UsageRecord
	var sum time.Duration
	for _, r := range recs {
		if r.SessionID != sid {
			continue
		}
		if n := len(out); n > 0 && !r.Start.Equal(out[n-1].End) {
			t.Fatalf("record %s starts %v, the one before ended %v", r.ID, r.Start, out[n-1].End)
		}
		if r.TenantID != "tenant-"+sid {
			t.Fatalf("record %s billed to %s", r.ID, r.TenantID)
		}
		out = append(out, r)
		sum += r.End.Sub(r.Start)
	}
	return out, sum
}

// A session whose worker dies while no gpuserverd runs keeps its checkpointed GPU time; the
// restarted server, finding nothing to adopt, closes it and bills nothing more.
func TestKilledServerKeepsCheckpointedUsage(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	data := t.TempDir()
	flags := []string{"--checkpoint-period", "100ms"}
	s := startServerOn(t, data, pub, priv, flags)
	hold(t, s, s.token("s-cut", sessiontoken.TierDedicated, 0), "8")
	var billed time.Duration
	waitFor(t, "300 ms of the open session billed", func() bool {
		_, billed = sessionRecords(t, s.usage(), "s-cut")
		return billed >= 300*time.Millisecond
	})
	workers := s.workers()
	if len(workers) != 1 {
		t.Fatalf("workers %v", workers)
	}
	s.kill()
	// The worker outlives its server (it would be adopted); here it dies before a new one starts.
	if err := syscall.Kill(workers[0], syscall.SIGKILL); err != nil {
		t.Fatalf("the worker did not outlive gpuserverd: %v", err)
	}
	waitFor(t, "the worker to die", func() bool { return processGone(workers[0]) })

	s2 := startServerOn(t, data, pub, priv, flags)
	recs, after := sessionRecords(t, s2.usage(), "s-cut")
	if after < billed || len(recs) < 3 {
		t.Fatalf("after the kill %v in %d records are billed, before it %v", after, len(recs), billed)
	}
	if m := s2.get("/metrics"); !strings.Contains(m, "gpuserverd_sessions_cut_total 1") || !strings.Contains(m, "gpuserverd_sessions_active 0") {
		t.Fatalf("metrics after restart:\n%s", m)
	}
	// The GPU is free: a new dedicated session runs and is billed apart.
	if out := s2.run(s2.token("s-next", sessiontoken.TierDedicated, 0), "probe", "init"); !strings.Contains(out, "INIT 0") {
		t.Fatalf("next session: %q", out)
	}
	waitFor(t, "the next session's record", func() bool {
		_, d := sessionRecords(t, s2.usage(), "s-next")
		return d > 0
	})
	if again, _ := sessionRecords(t, s2.usage(), "s-cut"); len(again) != len(recs) {
		t.Fatalf("the cut session was billed again after the restart: %d records, then %d", len(recs), len(again))
	}
	// Every worker leaves its end for a server that missed it; the one that billed it removes it.
	waitFor(t, "the billed session's end file to go", func() bool {
		left, _ := filepath.Glob(filepath.Join(data, "workers", "*.ended"))
		return len(left) == 0
	})
}

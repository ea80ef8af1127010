package hostile

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// TestSessionCaps is issue 13's finding 4: one token (one instance) cannot start workers without
// end, nor can all tenants together: the Hello past either cap is refused with the cap's name,
// and no worker is started for it.
func TestSessionCaps(t *testing.T) {
	s := start(t, "--max-sessions-per-instance", "2", "--max-sessions", "3")
	tok := s.token("inst-a", sessiontoken.TierShared, 16<<20)
	for i := range 2 {
		if _, r := s.hello(tok); r.Result != 0 {
			t.Fatalf("session %d of instance a: %d %q", i+1, r.Result, r.Message)
		}
	}
	waitWorkers(t, s, 2)
	_, r := s.hello(tok)
	if r.Result != 46 || !strings.Contains(r.Message, "instance inst-a already has 2 sessions") || !strings.Contains(r.Message, "--max-sessions-per-instance") {
		t.Fatalf("third session of one instance: %d %q, want 46 naming the per-instance cap", r.Result, r.Message)
	}
	if _, r := s.hello(s.token("inst-b", sessiontoken.TierShared, 16<<20)); r.Result != 0 {
		t.Fatalf("another instance's first session: %d %q", r.Result, r.Message)
	}
	_, r = s.hello(s.token("inst-c", sessiontoken.TierShared, 16<<20))
	if r.Result != 46 || !strings.Contains(r.Message, "--max-sessions)") {
		t.Fatalf("a session past the server's cap: %d %q, want 46 naming --max-sessions", r.Result, r.Message)
	}
	time.Sleep(200 * time.Millisecond) // a worker started for a refused Hello would show by now
	if w := s.workers(); len(w) != 3 {
		t.Fatalf("%d workers for 3 admitted sessions and 2 refused", len(w))
	}
	code, body := s.get("/metrics", s.adminAuth())
	if code != 200 || !containsMetricAtLeast(body, `gpuserverd_sessions_refused_total{reason="session_cap"}`, 2) {
		t.Fatalf("metrics: %s", body)
	}
}

// TestInstanceQuotaAcrossSessions is issue 13's finding 3: a shared-tier token's memory quota
// holds for its instance's sessions together (each its own worker process), and a worker killed
// with SIGKILL gives its share back.
func TestInstanceQuotaAcrossSessions(t *testing.T) {
	const quota = 10 << 20
	s := start(t)
	tok := s.token("inst-q", sessiontoken.TierShared, quota)
	first, r := s.hello(tok)
	if r.Result != 0 {
		t.Fatal(r.Message)
	}
	if res := first.alloc(4 << 20); res != 0 {
		t.Fatalf("first session's 4 MiB: %d", res)
	}
	firstWorker := waitWorkers(t, s, 1)[0]
	second, _ := s.hello(tok)
	if res := second.alloc(4 << 20); res != 0 {
		t.Fatalf("second session's 4 MiB: %d", res)
	}
	third, _ := s.hello(tok)
	if res := third.alloc(4 << 20); res != 2 {
		t.Fatalf("third session's 4 MiB with 8 of the instance's 10 MiB held: %d, want 2 (CUDA_ERROR_OUT_OF_MEMORY)", res)
	}
	if res := third.alloc(2 << 20); res != 0 {
		t.Fatalf("third session's 2 MiB, exactly the rest: %d", res)
	}
	var info wire.MemGetInfoReply
	third.send(&wire.MemGetInfo{})
	third.read(&info)
	if info.Total != quota || info.Free != 0 {
		t.Fatalf("cuMemGetInfo in the third session: free %d total %d, want 0 of %d (the instance's)", info.Free, info.Total, quota)
	}
	// The first session's worker dies without freeing: its 4 MiB return to the instance.
	if err := syscall.Kill(firstWorker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, s, 2)
	deadline := time.Now().Add(5 * time.Second)
	for third.alloc(4<<20) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a SIGKILLed worker's 4 MiB never returned to its instance's quota")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Another instance has a quota of its own.
	other, _ := s.hello(s.token("inst-other", sessiontoken.TierShared, quota))
	if res := other.alloc(8 << 20); res != 0 {
		t.Fatalf("another instance's 8 MiB: %d", res)
	}
}

// waitWorkers waits until the server has n workers and returns them.
func waitWorkers(t *testing.T, s *server, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := s.workers()
		if len(w) == n {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers, want %d", len(w), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

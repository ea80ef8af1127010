package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
)

// usageSink is an apiserver's POST /v1/agent/usage that keeps each id once, as billing does, and
// can be told to fail.
type usageSink struct {
	mu       sync.Mutex
	got      map[string]int // id -> times received
	batches  int
	fail     bool
	jsonOnly bool           // an apiserver from before the binary usage form
	forms    map[string]int // Content-Type -> batches stored
}

func (u *usageSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.URL.Path != "/v1/agent/usage" || r.Header.Get("Authorization") != "Bearer cred-1" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if u.fail {
		http.Error(w, `{"title":"database down"}`, http.StatusServiceUnavailable)
		return
	}
	var b api.UsageBatch
	var err error
	if ct := r.Header.Get("Content-Type"); ct == api.UsageBatchBinary && !u.jsonOnly {
		body, _ := io.ReadAll(r.Body)
		b, err = api.DecodeUsageBatch(body)
	} else {
		err = json.NewDecoder(r.Body).Decode(&b)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if u.forms == nil {
		u.forms = map[string]int{}
	}
	u.forms[r.Header.Get("Content-Type")]++
	u.batches++
	res := api.UsageBatchResult{}
	for _, rec := range b.Records {
		if u.got[rec.ID]++; u.got[rec.ID] > 1 {
			res.Duplicates++
		} else {
			res.Accepted++
		}
	}
	json.NewEncoder(w).Encode(res)
}

func appendRecords(t *testing.T, s *Server, n int) {
	t.Helper()
	for range n {
		if _, err := s.usage.Append(func(seq int) api.UsageRecord {
			now := time.Now().UTC()
			return api.UsageRecord{ID: fmt.Sprintf("gs1/sess/%d", seq), Kind: api.UsageGPU, Source: "gs1",
				TenantID: "t1", InstanceID: "i1", Start: now.Add(-time.Second), End: now, GPUCount: 1}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShipUsageResumesAfterLastAcknowledged(t *testing.T) {
	s, _ := newServer(t)
	sink := &usageSink{got: map[string]int{}}
	as := httptest.NewServer(sink)
	defer as.Close()
	hb := Heartbeat{APIServer: as.URL, Credential: "cred-1"}
	ctx := context.Background()

	appendRecords(t, s, 3)
	if n, err := s.ShipOnce(ctx, as.Client(), hb); err != nil || n != 3 {
		t.Fatalf("first ship: %d, %v", n, err)
	}
	// The apiserver is down: nothing is acknowledged, so the cursor stays.
	appendRecords(t, s, 2)
	sink.fail = true
	if _, err := s.ShipOnce(ctx, as.Client(), hb); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("ship to a failing apiserver: %v", err)
	}
	if c, _ := s.ackedCursor(); c != "gs1/sess/3" {
		t.Fatalf("cursor after a failed ship %q, want gs1/sess/3", c)
	}
	sink.fail = false
	// A restarted gpuserverd (same data dir) sends only what was not acknowledged.
	s.usage.Close()
	s2, err := New(Config{ServerID: "gs1", PublicKey: s.cfg.PublicKey, WorkerCommand: []string{"/bin/false"},
		DataDir: s.cfg.DataDir, BackendKind: sim.Kind}, sim.New(1, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.usage.Close()
	if n, err := s2.ShipOnce(ctx, as.Client(), hb); err != nil || n != 2 {
		t.Fatalf("ship after restart: %d, %v", n, err)
	}
	for id, n := range sink.got {
		if n != 1 {
			t.Errorf("record %s sent %d times", id, n)
		}
	}
	if len(sink.got) != 5 {
		t.Fatalf("apiserver got %d records, want 5", len(sink.got))
	}
	// A cursor naming a record the log lacks (a wiped log) sends everything again: billing
	// drops the duplicates, nothing is lost.
	if err := os.WriteFile(filepath.Join(s.cfg.DataDir, ackedFile), []byte("gs1/other/9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := s2.ShipOnce(ctx, as.Client(), hb); err != nil || n != 5 {
		t.Fatalf("ship with an unknown cursor: %d, %v", n, err)
	}
}

func TestJoinLearnsIDAndKeyAndRetries(t *testing.T) {
	calls := 0
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		var rep api.GPUServerReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil || len(rep.GPUs) != 2 || rep.GPUs[0].UUID != sim.UUID(0) {
			t.Errorf("join report %+v, %v", rep, err)
		}
		if calls == 1 { // the apiserver is not up yet
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(api.GPUServerAck{GPUServerID: "gs-42", TokenPublicKey: "a2V5"})
	}))
	defer as.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _ := newServer(t)
	ack, err := Join(ctx, Heartbeat{APIServer: as.URL, Credential: "c"}, sim.New(2, 1<<30), s.log)
	if err != nil || ack.GPUServerID != "gs-42" || ack.TokenPublicKey != "a2V5" || calls != 2 {
		t.Fatalf("join: %+v, %v after %d calls", ack, err, calls)
	}
	// A cancelled join says why and what failed last.
	as.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	if _, err := Join(cctx, Heartbeat{APIServer: as.URL, Credential: "c"}, sim.New(1, 1<<30), s.log); err == nil ||
		!strings.Contains(err.Error(), "last error") {
		t.Fatalf("join against nothing: %v", err)
	}
}

func TestReportFiltersInventoryToServedGPUs(t *testing.T) {
	s, _ := newServer(t)
	hb := Heartbeat{Inventory: func() ([]api.GPUInfo, error) {
		return []api.GPUInfo{{UUID: sim.UUID(1), Name: "NVML name", MemoryBytes: 1, Healthy: false},
			{UUID: "GPU-not-served", Name: "other", MemoryBytes: 1}}, nil
	}}
	r := s.Report(hb)
	if len(r.GPUs) != 1 || r.GPUs[0].UUID != sim.UUID(1) || r.GPUs[0].Name != "NVML name" || r.GPUs[0].Healthy {
		t.Fatalf("report with inventory: %+v", r.GPUs)
	}
	hb.Inventory = func() ([]api.GPUInfo, error) { return nil, fmt.Errorf("NVML gone") }
	if r := s.Report(hb); len(r.GPUs) != 2 || !r.GPUs[0].Healthy {
		t.Fatalf("report when NVML fails: %+v", r.GPUs)
	}
}

func TestJoinRefusedCredentialFailsAtOnce(t *testing.T) {
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"title":"Unauthenticated"}`, http.StatusUnauthorized)
	}))
	defer as.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _ := newServer(t)
	start := time.Now()
	_, err := Join(ctx, Heartbeat{APIServer: as.URL, Credential: "gcg_wrong"}, sim.New(1, 1<<30), s.log)
	if err == nil || !strings.Contains(err.Error(), "refuses this GPU server's credential") || time.Since(start) > 5*time.Second {
		t.Fatalf("join with a refused credential: %v after %v", err, time.Since(start))
	}
}

// Batches go in the binary usage form; an apiserver that refuses it (from before it) gets them as
// JSON, and every record arrives once either way.
func TestShipUsageBinaryWithJSONFallback(t *testing.T) {
	for _, jsonOnly := range []bool{false, true} {
		s, _ := newServer(t)
		sink := &usageSink{got: map[string]int{}, jsonOnly: jsonOnly}
		srv := httptest.NewServer(sink)
		appendRecords(t, s, 5)
		if n, err := s.ShipOnce(context.Background(), srv.Client(), Heartbeat{APIServer: srv.URL, Credential: "cred-1"}); err != nil || n != 5 {
			t.Fatalf("jsonOnly=%v: shipped %d, %v", jsonOnly, n, err)
		}
		srv.Close()
		want := map[string]int{api.UsageBatchBinary: 1}
		if jsonOnly {
			want = map[string]int{"application/json": 1}
		}
		if len(sink.got) != 5 || !maps.Equal(sink.forms, want) {
			t.Fatalf("jsonOnly=%v: %d records in %v, want 5 in %v", jsonOnly, len(sink.got), sink.forms, want)
		}
	}
}

package reconcile

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/virt"
)

// unreachable is a control plane whose usage endpoint cannot be reached.
type unreachable struct{ controlplane.Client }

func (unreachable) PushUsage(context.Context, api.UsageBatch) (api.UsageBatchResult, error) {
	return api.UsageBatchResult{}, errors.New("dial tcp: connection refused")
}

// spoolHostd is a hostd over e's data dir pushing usage to cp, with a fixed clock.
func spoolHostd(t *testing.T, e *env, cp controlplane.Client, now time.Time) *Reconciler {
	t.Helper()
	r, err := New(Config{ControlPlane: cp, Hypervisor: e.hv, DataDir: e.data, ImagesDir: e.images,
		Network: virt.Network{Kind: "user"}, Hostname: "node1", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	r.hostID = "host-node1" // as the first heartbeat would set it
	return r
}

func vm(id, tenant string) api.DesiredInstance {
	return api.DesiredInstance{ID: id, TenantID: tenant, InstanceType: "small", Spec: api.InstanceSpec{VCPUs: 2, MemoryMiB: 512}}
}

// Records queued while the apiserver is unreachable survive hostd's death and are shipped once.
func TestUsageSpoolSurvivesHostdDeath(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)

	dead := spoolHostd(t, e, unreachable{e.cp.Client(t)}, now)
	dead.noteRunning(vm("a1", "tenantA"))
	dead.noteRunning(vm("b1", "tenantB"))
	dead.noteRunning(vm("a1", "tenantA")) // the same window again: queued once
	if err := dead.flushUsage(ctx); err == nil {
		t.Fatal("flush to an unreachable apiserver succeeded")
	}
	// hostd dies here: nothing more of dead runs. A new hostd starts on the same data dir while
	// the apiserver is back.
	alive := spoolHostd(t, e, e.cp.Client(t), now)
	if len(alive.usage.pending) != 2 {
		t.Fatalf("replayed %d records, want 2", len(alive.usage.pending))
	}
	alive.noteRunning(vm("a1", "tenantA")) // already spooled: not queued twice
	if err := alive.flushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, u := range e.cp.Usage() {
		got[u.InstanceID] = u.TenantID
		if !u.Start.Equal(now.Truncate(time.Minute)) || u.End.Sub(u.Start) != time.Minute {
			t.Fatalf("record window %+v", u)
		}
	}
	if len(e.cp.Usage()) != 2 || got["a1"] != "tenantA" || got["b1"] != "tenantB" {
		t.Fatalf("shipped %+v", e.cp.Usage())
	}
	// Acknowledged records are compacted away: a third start has nothing to send.
	if b, err := os.ReadFile(filepath.Join(e.data, spoolFile)); err != nil || len(b) != 0 {
		t.Fatalf("spool after acknowledgement: %q, %v", b, err)
	}
	if third := spoolHostd(t, e, e.cp.Client(t), now); len(third.usage.pending) != 0 {
		t.Fatalf("third start replays %d records", len(third.usage.pending))
	}
	// A record queued after compaction lands in the new file.
	alive.noteRunning(vm("c1", "tenantC"))
	if fourth := spoolHostd(t, e, e.cp.Client(t), now); len(fourth.usage.pending) != 1 || fourth.usage.pending[0].InstanceID != "c1" {
		t.Fatalf("after compaction, spooled %+v", fourth.usage.pending)
	}
}

func TestUsageSpoolTornAndCorrupt(t *testing.T) {
	e := newEnv(t, 0)
	now := time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)
	r := spoolHostd(t, e, unreachable{e.cp.Client(t)}, now)
	r.noteRunning(vm("a1", "tenantA"))
	path := filepath.Join(e.data, spoolFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"host-node1/b1/17`) // a crash mid-append
	f.Close()
	if r2 := spoolHostd(t, e, e.cp.Client(t), now); len(r2.usage.pending) != 1 || r2.usage.pending[0].InstanceID != "a1" {
		t.Fatalf("torn tail: %+v", r2.usage.pending)
	}
	before, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("not json\n"), before...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{ControlPlane: e.cp.Client(t), Hypervisor: e.hv, DataDir: e.data, ImagesDir: e.images})
	if err == nil || !strings.Contains(err.Error(), "line 1 is not a VM usage record") || !strings.Contains(err.Error(), spoolFile) {
		t.Fatalf("corrupt spool: %v", err)
	}
	if after, _ := os.ReadFile(path); len(after) != len(before)+len("not json\n") {
		t.Fatal("a refused spool was changed")
	}
}

// FuzzReadSpool: any file content either reads as whole VM records up to an offset within it, or
// is refused; a refused spool is never half-read.
func FuzzReadSpool(f *testing.F) {
	f.Add([]byte(`{"id":"h/i/60","kind":"vm","start":"2026-11-22T12:00:00Z","end":"2026-11-22T12:01:00Z"}` + "\n"))
	f.Add([]byte(`{"id":"h/i/60","kind":"gpu"}` + "\n"))
	f.Add([]byte("{\"id\":\"h/i/6"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, off, err := readSpool(bytes.NewReader(b))
		if err != nil {
			if recs != nil || off != 0 {
				t.Fatalf("refused spool yet returned %d records, offset %d", len(recs), off)
			}
			return
		}
		if off < 0 || off > int64(len(b)) || (off > 0 && b[off-1] != '\n') {
			t.Fatalf("offset %d in %d bytes", off, len(b))
		}
		for _, r := range recs {
			if r.ID == "" || r.Kind != api.UsageVM {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/billing/ingest"
	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
	"gpucloud/billing/webhook"
)

// testClock is a settable clock for the store's allocation dates and billing's "now".
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// A dedicated GPU instance held 90 minutes without a single CUDA session is billed 90
// GPU-minutes (and 90 VM-minutes); a shared slice is billed by its quota while held; the root disk
// is billed while the instance exists, stopped included; a stopped instance is billed storage
// only; gpuserverd's session records are utilisation and change no charge.
func TestHeldTimeIsBilledFromStateTransitions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	clock := &testClock{now: t0}
	e.st.SetClock(clock.Now)
	hostKey := e.host("h1", 32, 65536)
	e.gpuServer("g1", 2)
	tenantA := uuid.MustParse(e.tenantA.ID)
	hook, err := webhook.NewStore(e.st.Pool).Create(ctx, &tenantA, "https://example.com/hook", []string{webhook.InstanceState, webhook.InstanceFailed})
	if err != nil {
		t.Fatal(err)
	}
	report := func(id uuid.UUID, state string) {
		t.Helper()
		e.must(204, "PUT", "/v1/agent/host/instances/"+id.String()+"/status", hostKey, api.InstanceObserved{State: state}, nil)
	}
	_, ded, body := e.create(e.tenantA.Key, "ded", e.dedType)
	_, shr, body2 := e.create(e.tenantA.Key, "shr", e.shrType)
	if ded.ID == uuid.Nil || shr.ID == uuid.Nil {
		t.Fatalf("create: %s %s", body, body2)
	}
	report(ded.ID, "provisioning")
	clock.Set(t0.Add(3 * time.Minute)) // provisioning is not billed
	report(ded.ID, "running")
	report(shr.ID, "running")
	// A 10 GiB data volume, attached to the dedicated instance: its storage is billed from its
	// creation while it exists, the instance running or stopped.
	var vol store.Volume
	e.must(201, "POST", "/v1/volumes", e.tenantA.Key, map[string]any{"name": "data", "size_gib": 10}, &vol)
	e.must(200, "POST", "/v1/volumes/"+vol.ID.String()+"/attach", e.tenantA.Key, map[string]any{"instance_id": ded.ID}, nil)
	clock.Set(t0.Add(3*time.Minute + 90*time.Minute))
	e.must(200, "POST", "/v1/instances/"+ded.ID.String()+"/stop", e.tenantA.Key, nil, nil)
	clock.Set(t0.Add(3*time.Minute + 90*time.Minute + 30*time.Second)) // still held while stopping
	report(ded.ID, "stopped")
	report(ded.ID, "stopped") // a repeated report changes nothing
	clock.Set(t0.Add(2*time.Hour + 3*time.Minute))
	e.must(202, "DELETE", "/v1/instances/"+shr.ID.String(), e.tenantA.Key, nil, nil)
	report(shr.ID, "deleted")

	_, cpu, _ := e.create(e.tenantA.Key, "cpu", e.cpuType)
	e.must(204, "PUT", "/v1/agent/host/instances/"+cpu.ID.String()+"/status", hostKey, api.InstanceObserved{State: "failed", Reason: "qemu crashed"}, nil)

	// Every transition queued one instance.state webhook, in its own transaction; the failure
	// an instance.failed one too.
	var states, failed int
	if err := e.st.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE event_type = 'instance.state'),
		count(*) FILTER (WHERE event_type = 'instance.failed') FROM billing_webhook_deliveries WHERE webhook_id = $1`, hook.ID).
		Scan(&states, &failed); err != nil {
		t.Fatal(err)
	}
	if states != 8 || failed != 1 { // ded: provisioning, running, stopping, stopped; shr: running, deleting, deleted; cpu: failed
		t.Fatalf("%d instance.state and %d instance.failed webhooks queued, want 8 and 1", states, failed)
	}

	// A CUDA session on the stopped instance's GPU would be utilisation, never a charge.
	in := ingest.New(e.st.Pool, nil)
	in.SetClock(func() time.Time { return t0.AddDate(0, 1, 0) })
	if res, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{{ID: "s1", Kind: "gpu", Source: "g1",
		TenantID: e.tenantA.ID, InstanceID: ded.ID.String(), Start: t0.Add(10 * time.Minute), End: t0.Add(40 * time.Minute),
		GPUModel: "H100", Tier: "dedicated", GPUCount: 1}}}, nil); err != nil || res.Accepted != 1 {
		t.Fatalf("ingest session: %+v %v", res, err)
	}

	book := rating.NewBook(e.st.Pool)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range []rating.Price{
		{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 4_000_000},
		{Kind: "gpu", GPUModel: "H100", Tier: "shared", UnitPriceMicros: 100_000},
		{Kind: "vm", InstanceType: "h100-dedicated", UnitPriceMicros: 200_000},
		{Kind: "vm", InstanceType: "h100-shared", UnitPriceMicros: 100_000},
		{Kind: "storage", UnitPriceMicros: 100},
	} {
		p.EffectiveFrom = from
		if _, err := book.Add(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	april := march.AddDate(0, 1, 0)
	lines, err := rating.Rate(ctx, e.st.Pool, uuid.MustParse(e.tenantA.ID), march)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, l := range lines {
		got[l.Kind+"/"+l.Tier+l.InstanceType] += l.QuantityMs
	}
	const minute = 60_000
	stillThere := april.Sub(t0.Add(3 * time.Minute)).Milliseconds() // ded's disk, running then stopped
	want := map[string]int64{
		"gpu/dedicated":     90*minute + 30_000,                           // 90.5 minutes x 1 GPU, no session needed
		"vm/h100-dedicated": 90*minute + 30_000,                           //
		"gpu/shared":        120 * minute * 10 * 1024,                     // 2 h x 10 GiB slice (MiB-ms)
		"vm/h100-shared":    120 * minute,                                 //
		"storage/":          (20+10)*1024*stillThere + 20*1024*120*minute, // root disks and the volume, GiB x 1024 MiB-ms
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d unit-ms, want %d", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("lines %v, want %v", got, want)
	}

	// April: the dedicated instance stays stopped, so only its disk and volume cost (30 days x
	// 30 GiB); no GPU, no VM.
	inv := invoice.New(e.st.Pool)
	inv.SetClock(func() time.Time { return april.AddDate(0, 1, 0) })
	apr, err := inv.Close(ctx, uuid.MustParse(e.tenantA.ID), april)
	if err != nil {
		t.Fatal(err)
	}
	if len(apr.Lines) != 1 || apr.Lines[0].Kind != "storage" || apr.Lines[0].Quantity != "21600.000000" || apr.TotalCents != 216 {
		t.Fatalf("april %+v, want 30 GiB x 720 h of storage only (2.16)", apr)
	}
}

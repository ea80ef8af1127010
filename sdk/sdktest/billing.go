package sdktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/sdk"
)

// Meter plays a GPU server that reports usage to billing over the agent API.
type Meter struct {
	ID     string // the GPU server's id: the records' source
	Client *sdk.Client
	seq    int
	env    *Env
}

// Meter registers a GPU server whose credential sends usage.
func (e *Env) Meter(t testing.TB, name string) *Meter {
	t.Helper()
	d, err := e.OperatorClient.CreateGPUServer(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return &Meter{ID: d.ID, Client: e.Client(t, d.Credential), env: e}
}

// GPU sends one GPU session interval of tenant: tier dedicated or shared (a 20 GiB slice),
// one GPU of model over [start, start+d), and records that the tenant held that GPU over the
// same interval. Every record must be accepted.
func (m *Meter) GPU(t testing.TB, tenant, model, tier string, start time.Time, d time.Duration) {
	t.Helper()
	m.seq++
	r := api.UsageRecord{ID: fmt.Sprintf("%s/rec-%d", m.ID, m.seq), Kind: api.UsageGPU, Source: m.ID, TenantID: tenant,
		InstanceID: "11111111-1111-4111-8111-111111111111", SessionID: fmt.Sprintf("s%d", m.seq),
		Start: start, End: start.Add(d), GPUModel: model, Tier: tier, GPUCount: 1}
	if tier == "shared" {
		r.MemoryQuota = 20 << 30
	}
	res, err := m.Client.PostUsage(context.Background(), api.UsageBatch{Records: []api.UsageRecord{r}})
	if err != nil || res.Accepted != 1 {
		t.Fatalf("post usage %+v: %+v %v", r, res, err)
	}
	// Sessions are utilisation; what is charged is what the tenant held. These tests bill as if
	// the instance held the GPU exactly while the session ran, as the control plane would record
	// for an instance running over the same interval.
	quantity := int64(1)
	if tier == "shared" {
		quantity = 20 << 10
	}
	if _, err := m.env.Store.Pool.Exec(context.Background(), `INSERT INTO billing_allocations (tenant_id, instance_id, kind,
		resource_id, tier, gpu_model, quantity, started_at, ended_at) VALUES ($1, gen_random_uuid(), 'gpu', $2, $3, $4, $5, $6, $7)`,
		tenant, r.ID, tier, model, quantity, start, start.Add(d)); err != nil {
		t.Fatalf("hold %+v: %v", r, err)
	}
}

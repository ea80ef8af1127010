package sdktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/sdk"
)

// Meter plays a GPU server that reports usage to billing over the agent API. Billing takes usage
// only for instances placed on the reporting server, so the meter places one instance per tenant
// and tier on itself (it must be the environment's only GPU server) and reports for those.
type Meter struct {
	ID        string // the GPU server's id: the records' source
	Client    *sdk.Client
	env       *Env
	seq       int
	hostReady bool
	instances map[string]string // tenant/tier -> instance id
}

// Meter registers a GPU server with eight H100s whose credential sends usage. An environment
// has one meter (placement could pick another's server): later calls return the first.
func (e *Env) Meter(t testing.TB, name string) *Meter {
	t.Helper()
	if e.meter == nil {
		id, c := e.GPUServer(t, name, 8)
		e.meter = &Meter{ID: id, Client: c, env: e, instances: map[string]string{}}
	}
	return e.meter
}

// sharedSlice is the shared tier's memory slice the migrations seed: a shared instance's quota.
const sharedSlice = 10 << 30

// GPU sends one GPU session interval of tenant (A or B): tier dedicated or shared, one GPU of
// model over [start, start+d). Every record must be accepted.
func (m *Meter) GPU(t testing.TB, tenant, model, tier string, start time.Time, d time.Duration) {
	t.Helper()
	m.seq++
	inst := m.instance(t, tenant, tier)
	r := api.UsageRecord{ID: fmt.Sprintf("%s/rec-%d", m.ID, m.seq), Kind: api.UsageGPU, Source: m.ID, TenantID: tenant,
		InstanceID: inst, SessionID: inst, Start: start, End: start.Add(d), GPUModel: model, Tier: tier, GPUCount: 1}
	if tier == "shared" {
		r.MemoryQuota = sharedSlice
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
		quantity = sharedSlice >> 20 // MiB
	}
	if _, err := m.env.Store.Pool.Exec(context.Background(), `INSERT INTO billing_allocations (tenant_id, instance_id, kind,
		resource_id, tier, gpu_model, quantity, started_at, ended_at) VALUES ($1, $2, 'gpu', $3, $4, $5, $6, $7, $8)`,
		tenant, inst, r.ID, tier, model, quantity, start, start.Add(d)); err != nil {
		t.Fatalf("hold %+v: %v", r, err)
	}
}

// instance is the meter's instance of tenant and tier, placed on first use.
func (m *Meter) instance(t testing.TB, tenant, tier string) string {
	t.Helper()
	if id, ok := m.instances[tenant+"/"+tier]; ok {
		return id
	}
	if !m.hostReady {
		m.env.Host(t, m.ID[len(m.ID)-8:]+"-meter-host", 512)
		m.hostReady = true
	}
	var key string
	for _, tf := range []Tenant{m.env.A, m.env.B} {
		if tf.ID == tenant {
			key = tf.AdminKey
		}
	}
	typ := map[string]string{"dedicated": m.env.Dedicated, "shared": m.env.Shared}[tier]
	if key == "" || typ == "" {
		t.Fatalf("meter: tenant %s tier %s: want tenant A or B, tier dedicated or shared", tenant, tier)
	}
	inst, err := m.env.Client(t, key).CreateInstance(context.Background(), sdk.CreateInstanceRequest{
		Name: "meter-" + tier, InstanceTypeID: typ, Image: "ubuntu-24.04"})
	if err != nil {
		t.Fatalf("meter: place an instance of %s on %s: %v", tenant, tier, err)
	}
	m.instances[tenant+"/"+tier] = inst.ID
	return inst.ID
}

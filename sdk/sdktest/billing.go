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
}

// Meter registers a GPU server whose credential sends usage.
func (e *Env) Meter(t testing.TB, name string) *Meter {
	t.Helper()
	d, err := e.OperatorClient.CreateGPUServer(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return &Meter{ID: d.ID, Client: e.Client(t, d.Credential)}
}

// GPU sends one GPU session interval of tenant: tier dedicated or shared (a 20 GiB slice),
// one GPU of model over [start, start+d). Every record must be accepted.
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
}

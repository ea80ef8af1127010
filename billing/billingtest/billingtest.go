// Package billingtest holds helpers shared by billing's tests and its benchmark: connecting to a
// pgtest database and making usage records.
package billingtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
)

// Pool opens a pool on url, closed when the test ends.
func Pool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// GPU returns a valid dedicated gpu record of tenant over [start, start+d).
func GPU(id string, tenant uuid.UUID, start time.Time, d time.Duration) api.UsageRecord {
	return api.UsageRecord{
		ID: id, Kind: api.UsageGPU, Source: "gpusrv-1", TenantID: tenant.String(),
		InstanceID: "inst-1", SessionID: "sess-1", Start: start, End: start.Add(d),
		GPUModel: "H100", Tier: "dedicated", GPUCount: 1,
		MemoryPeakBytes: 2 << 30, MemoryAvgBytes: 1 << 30, BytesMoved: 1 << 20,
	}
}

// VM returns a valid vm record of tenant over [start, start+d).
func VM(id string, tenant uuid.UUID, start time.Time, d time.Duration) api.UsageRecord {
	return api.UsageRecord{
		ID: id, Kind: api.UsageVM, Source: "host-1", TenantID: tenant.String(),
		InstanceID: "inst-1", Start: start, End: start.Add(d),
		InstanceType: "g1.large", VCPUs: 8, MemoryMiB: 32768,
	}
}

// Models and tiers the random generator draws from.
var (
	Models = []string{"H100", "A100", "L40S"}
	Tiers  = []string{"dedicated", "shared"}
)

// Generator makes random but reproducible gpu records for a month: sessions of a few minutes
// (some crossing an hour) spread over the tenants, GPU models and tiers.
type Generator struct {
	Rng     *rand.Rand
	Tenants []uuid.UUID
	Month   time.Time // first instant of the month, UTC
	Prefix  string    // id prefix, unique per run
	// Step, when set, makes records arrive in time order like a daemon's: each starts Step after
	// the previous one (wrapping at the month's end) instead of anywhere in the month.
	Step   time.Duration
	seq    int
	cursor time.Duration
}

// NewGenerator seeds a generator with n tenants.
func NewGenerator(seed uint64, tenants int, month time.Time, prefix string) *Generator {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &Generator{Rng: rng, Month: month, Prefix: prefix}
	for i := 0; i < tenants; i++ {
		var b [16]byte
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		u, _ := uuid.FromBytes(b[:])
		u[6] = (u[6] & 0x0f) | 0x40 // version 4
		u[8] = (u[8] & 0x3f) | 0x80
		g.Tenants = append(g.Tenants, u)
	}
	return g
}

// Next returns the next record.
func (g *Generator) Next() api.UsageRecord {
	g.seq++
	days := time.Date(g.Month.Year(), g.Month.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(g.Month)
	// Keep the whole interval inside the month: start at least 20 minutes before its end.
	var start time.Time
	if g.Step > 0 {
		start = g.Month.Add(g.cursor).Truncate(time.Millisecond)
		g.cursor = (g.cursor + g.Step) % (days - 20*time.Minute)
	} else {
		start = g.Month.Add(time.Duration(g.Rng.Int64N(int64(days-20*time.Minute)/int64(time.Millisecond))) * time.Millisecond)
	}
	d := time.Duration(1+g.Rng.Int64N(int64(10*time.Minute/time.Millisecond))) * time.Millisecond
	tier := Tiers[g.Rng.IntN(len(Tiers))]
	r := api.UsageRecord{
		ID:         fmt.Sprintf("%s/%09d", g.Prefix, g.seq),
		Kind:       api.UsageGPU,
		Source:     "gpusrv-bench",
		TenantID:   g.Tenants[g.Rng.IntN(len(g.Tenants))].String(),
		InstanceID: fmt.Sprintf("inst-%d", g.Rng.IntN(1000)),
		SessionID:  fmt.Sprintf("sess-%d", g.Rng.IntN(100000)),
		Start:      start, End: start.Add(d),
		GPUModel: Models[g.Rng.IntN(len(Models))], Tier: tier, GPUCount: 1 + g.Rng.IntN(4),
		MemoryPeakBytes: 8 << 30, MemoryAvgBytes: 4 << 30, BytesMoved: uint64(g.Rng.IntN(1 << 30)),
	}
	if tier == "shared" {
		r.GPUCount = 1
		r.MemoryQuota = uint64(1+g.Rng.IntN(80)) << 30
	}
	return r
}

// Batch returns the next n records.
func (g *Generator) Batch(n int) api.UsageBatch {
	b := api.UsageBatch{Records: make([]api.UsageRecord, n)}
	for i := range b.Records {
		b.Records[i] = g.Next()
	}
	return b
}

// Reseed restarts the record stream (keeping the tenants), so several generators share tenants
// but not records.
func (g *Generator) Reseed(seed uint64) {
	g.Rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Alloc is one interval of what a tenant held, as the control plane records it (package meter).
// A zero End leaves it open. Quantity: GPUs (dedicated), MiB of quota (shared), 1 (vm), MiB (storage).
type Alloc struct {
	Tenant                         uuid.UUID
	Instance                       uuid.UUID // zero: a new one
	Kind, Tier, GPUModel, InstType string
	Quantity                       int64
	Start, End                     time.Time
}

// Hold writes a as an allocation row, for tests of rating that have no instances behind them.
func Hold(tb testing.TB, pool *pgxpool.Pool, a Alloc) {
	tb.Helper()
	if a.Instance == uuid.Nil {
		a.Instance = uuid.New()
	}
	var end *time.Time
	if !a.End.IsZero() {
		end = &a.End
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO billing_allocations (tenant_id, instance_id, kind,
		resource_id, tier, gpu_model, instance_type, quantity, started_at, ended_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		a.Tenant, a.Instance, a.Kind, uuid.NewString(), a.Tier, a.GPUModel, a.InstType, a.Quantity, a.Start, end); err != nil {
		tb.Fatalf("hold %+v: %v", a, err)
	}
}

// Dedicated is n dedicated H100s of an instance of type g1.large held over [start, start+d).
func Dedicated(tenant uuid.UUID, n int64, start time.Time, d time.Duration) Alloc {
	return Alloc{Tenant: tenant, Kind: "gpu", Tier: "dedicated", GPUModel: "H100", InstType: "g1.large",
		Quantity: n, Start: start, End: start.Add(d)}
}

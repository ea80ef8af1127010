package report_test

import (
	"context"
	"encoding/csv"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/internal/pgtest"
)

// Finance's month-close report: held GPU-hours (charged) beside utilised GPU-hours (sessions,
// not charged), VM-hours, storage GiB-hours and revenue, per tenant and instance type; as CSV too.
func TestHeldReport(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	book := rating.NewBook(pool)
	for _, p := range []rating.Price{
		{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 2_000_000},
		{Kind: "vm", InstanceType: "g1.large", UnitPriceMicros: 500_000},
		{Kind: "storage", UnitPriceMicros: 1_000},
	} {
		p.EffectiveFrom = march.AddDate(-1, 0, 0)
		if _, err := book.Add(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	a, b := uuid.New(), uuid.New()
	billingtest.Hold(t, pool, billingtest.Dedicated(a, 2, march.Add(time.Hour), 3*time.Hour)) // 6 GPU-h x 2.00 = 12.00
	billingtest.Hold(t, pool, billingtest.Alloc{Tenant: a, Kind: "vm", InstType: "g1.large", Quantity: 1,
		Start: march.Add(time.Hour), End: march.Add(4 * time.Hour)}) // 3 h x 0.50 = 1.50
	billingtest.Hold(t, pool, billingtest.Alloc{Tenant: a, Kind: "storage", InstType: "g1.large", Quantity: 10 << 10,
		Start: march.Add(time.Hour), End: march.Add(11 * time.Hour)}) // 100 GiB-h x 0.001 = 0.10
	billingtest.Hold(t, pool, billingtest.Dedicated(b, 1, march.Add(2*time.Hour), time.Hour)) // 2.00
	in := ingest.New(pool, nil)
	in.SetClock(func() time.Time { return march.AddDate(0, 2, 0) })
	if _, err := in.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{
		billingtest.GPU("a1", a, march.Add(time.Hour), 30*time.Minute), // 0.5 GPU-h used of 6 held
	}}, nil); err != nil {
		t.Fatal(err)
	}
	r := report.New(pool)
	rep, err := r.Held(ctx, report.HeldQuery{From: march, To: march.AddDate(0, 1, 0), GroupBy: []string{"tenant"}}, march.AddDate(0, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	byTenant := map[string]report.HeldRow{}
	for _, x := range rep.Rows {
		byTenant[x.Group["tenant"]] = x
	}
	ra := byTenant[a.String()]
	if ra.HeldGPUHours != "6.000000" || ra.UtilisedGPUHours != "0.500000" || ra.VMHours != "3.000000" ||
		ra.StorageGiBHours != "100.000000" || ra.RevenueCents != 1360 {
		t.Fatalf("tenant a %+v", ra)
	}
	if rb := byTenant[b.String()]; rb.HeldGPUHours != "1.000000" || rb.UtilisedGPUMs != 0 || rb.RevenueCents != 200 {
		t.Fatalf("tenant b %+v", rb)
	}
	if rep.Total.RevenueCents != 1560 || rep.Total.HeldGPUMs != 7*3_600_000 || len(rep.Rows) != 2 {
		t.Fatalf("total %+v over %d rows", rep.Total, len(rep.Rows))
	}
	// Two dimensions at once; the open month counts intervals still open up to now only.
	billingtest.Hold(t, pool, billingtest.Alloc{Tenant: b, Kind: "vm", InstType: "g1.large", Quantity: 1, Start: march.Add(time.Hour)})
	rep, err = r.Held(ctx, report.HeldQuery{From: march, To: march.AddDate(0, 1, 0), GroupBy: []string{"tenant", "instance_type"}}, march.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var b2 report.HeldRow
	for _, x := range rep.Rows {
		if x.Group["tenant"] == b.String() && x.Group["instance_type"] == "g1.large" {
			b2 = x
		}
	}
	if b2.VMHours != "2.000000" || b2.HeldGPUHours != "1.000000" {
		t.Fatalf("tenant b at 03:00 %+v", b2)
	}
	var sb strings.Builder
	if err := report.WriteHeldCSV(&sb, rep); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(sb.String())).ReadAll()
	if err != nil || len(recs) != len(rep.Rows)+1 || recs[0][0] != "tenant" || recs[0][1] != "instance_type" || recs[0][3] != "held_gpu_hours" {
		t.Fatalf("csv %q %v", recs, err)
	}
	var fe *report.FieldError
	if _, err := r.Held(ctx, report.HeldQuery{From: march, To: march.AddDate(0, 1, 0), GroupBy: []string{"colour"}}, march); !errors.As(err, &fe) || fe.Field != "group_by" {
		t.Fatalf("bad group_by: %v", err)
	}
}

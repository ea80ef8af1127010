package ingest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
	"gpucloud/billing/ingest"
)

// The fleet rollups are the tenants' rollups summed over tenants, whichever path stored the
// records: spread batches (direct), batches that compress (pending), batches holding duplicates
// (SQL), GPU and VM records, records crossing hours; replayed batches count once in both.
func TestFleetRollupsSumTheTenants(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	spread := billingtest.NewGenerator(7, 500, march, "spread")
	dense := billingtest.NewGenerator(8, 2, march, "dense")
	dense.Step = time.Minute
	one := uuid.New()
	var vms []api.UsageRecord
	for i := range 20 {
		vms = append(vms, billingtest.VM(fmt.Sprintf("vm-%d", i), one, march.Add(time.Duration(i)*7*time.Minute), 50*time.Minute))
	}
	first := spread.Batch(300)
	batches := []api.UsageBatch{first, dense.Batch(300), {Records: vms}, spread.Batch(300),
		// Replays: a whole batch again, and half of one beside new records (the duplicate path).
		first, {Records: append(append([]api.UsageRecord{}, first.Records[:150]...), spread.Batch(100).Records...)}}
	for i, b := range batches {
		if _, err := in.Ingest(ctx, b, nil); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if _, err := ingest.Flush(ctx, pool); err != nil {
		t.Fatal(err)
	}
	sums := func(from string) []string {
		t.Helper()
		return texts(t, pool, `SELECT concat_ws(' ', hour, kind, tier, gpu_model, instance_type, sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records))
			FROM `+from+` GROUP BY hour, kind, tier, gpu_model, instance_type ORDER BY 1`)
	}
	tenants, fleet := sums("billing_usage_hourly"), sums("billing_usage_fleet")
	if len(tenants) == 0 || !slices.Equal(tenants, fleet) {
		t.Fatalf("fleet rollups differ from the tenants' summed:\ntenants %d rows %v\nfleet   %d rows %v", len(tenants), tenants, len(fleet), fleet)
	}
	if n := count(t, pool, `SELECT sum(records) FROM billing_usage_fleet`); n != 300+300+20+300+100 {
		t.Fatalf("fleet counts %d records, want %d", n, 1020)
	}
	if n := count(t, pool, `SELECT count(*) FROM billing_usage_fleet_pending`); n != 0 {
		t.Fatalf("%d fleet rows still pending after a flush", n)
	}
}

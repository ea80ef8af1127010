package ingest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
)

// usageMonths lists billing_usage_months as "tenant period" strings, sorted, without flushing:
// a month must be listed as soon as its usage is acknowledged.
func usageMonths(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return texts(t, pool, `SELECT tenant_id::text || ' ' || to_char(booked_period, 'YYYY-MM') FROM billing_usage_months ORDER BY 1`)
}

// texts runs q, which selects one text column.
func texts(t *testing.T, pool *pgxpool.Pool, q string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return got
}

// Every path that stores records lists their (tenant, booked period): a spread batch (direct
// rollups), a batch that compresses (pending), one holding a duplicate (the ON CONFLICT path, here
// with a tenant first seen in it), and a record of a closed month (listed in the month it is booked
// in). A second ingester, which has seen none of these pairs, adds nothing twice.
func TestUsageMonthsListedOnEveryPath(t *testing.T) {
	ctx := context.Background()
	in, pool := newIngester(t)
	var want []string
	var spread []api.UsageRecord
	for i := range 10 {
		tenant := uuid.New()
		spread = append(spread, billingtest.GPU(fmt.Sprintf("spread-%d", i), tenant, march.Add(time.Hour), time.Minute))
		want = append(want, tenant.String()+" 2026-03")
	}
	dense, late, dup := uuid.New(), uuid.New(), uuid.New()
	var denseRecs []api.UsageRecord
	for i := range 10 {
		denseRecs = append(denseRecs, billingtest.GPU(fmt.Sprintf("dense-%d", i), dense, march.AddDate(0, 1, 0).Add(time.Duration(i)*time.Minute), time.Minute))
	}
	want = append(want, dense.String()+" 2026-04", late.String()+" 2026-04", dup.String()+" 2026-03")
	if _, err := pool.Exec(ctx, `INSERT INTO billing_invoices (tenant_id, period, status, closed_at) VALUES ($1, $2, 'closed', now())`, late, march); err != nil {
		t.Fatal(err)
	}
	batches := [][]api.UsageRecord{
		spread,
		denseRecs,
		{billingtest.GPU("late", late, march.Add(time.Hour), time.Minute)},
		// "spread-0" is stored already: the whole batch takes the duplicate path.
		{spread[0], billingtest.GPU("dup-new-tenant", dup, march.Add(3*time.Hour), time.Minute)},
	}
	for i, b := range batches {
		if _, err := in.Ingest(ctx, api.UsageBatch{Records: b}, nil); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	slices.Sort(want)
	if got := usageMonths(t, pool); !slices.Equal(got, want) {
		t.Fatalf("usage months\n got %v\nwant %v", got, want)
	}
	// A fresh ingester (another replica) stores new records of known months: no error, no change.
	other, _ := newIngesterOn(t, pool)
	if _, err := other.Ingest(ctx, api.UsageBatch{Records: []api.UsageRecord{
		billingtest.GPU("again", dense, march.AddDate(0, 1, 0).Add(time.Hour), time.Minute)}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := usageMonths(t, pool); !slices.Equal(got, want) {
		t.Fatalf("after a second ingester: %v, want %v", got, want)
	}
}

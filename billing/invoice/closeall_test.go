package invoice_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/invoice"
)

// Closing every tenant's month is one durable job: a runner cut short mid-job leaves it running,
// another takes it over once the lease lapses and finishes it; every tenant gets exactly one
// invoice, those closed by hand before are skipped.
func TestCloseAllResumesAfterInterruption(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	var tenants []uuid.UUID
	for i := range 30 {
		tn := uuid.New()
		tenants = append(tenants, tn)
		e.hold(t, billingtest.Dedicated(tn, 1, march.Add(time.Duration(i)*time.Hour), time.Hour))
	}
	// A tenant with usage records (utilisation) and nothing held gets its (empty) invoice too,
	// and one with usage in another month only gets none.
	usageOnly, aprilOnly := uuid.New(), uuid.New()
	e.ingest(t, billingtest.GPU("u1", usageOnly, march.Add(time.Hour), time.Hour), billingtest.GPU("u2", aprilOnly, april, time.Hour))
	if _, err := e.inv.Close(ctx, tenants[0], march); err != nil { // by hand, before the job
		t.Fatal(err)
	}
	if _, err := e.inv.StartCloseAll(ctx, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, invoice.ErrNotEnded) {
		t.Fatalf("closing June on June 1st: %v", err)
	}
	job, err := e.inv.StartCloseAll(ctx, march)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.inv.StartCloseAll(ctx, march)
	if err != nil || again.ID != job.ID {
		t.Fatalf("a second start made another job: %+v %v", again, err)
	}

	// Runner A dies (its context ends) after a few tenants.
	cut, stop := context.WithCancel(ctx)
	a := invoice.NewJobRunner(e.inv, nil)
	a.Workers = 2
	var n atomic.Int32
	a.AfterClose = func() {
		if n.Add(1) == 8 {
			stop()
		}
	}
	if ok, err := a.RunOnce(cut); !ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("runner A: %v %v", ok, err)
	}
	mid, _ := e.inv.GetJob(ctx, job.ID)
	if mid.Status != "running" || mid.Closed == 0 || mid.Closed >= 30 {
		t.Fatalf("after the cut: %+v", mid)
	}
	// Its lease still holds: nobody takes the job over yet.
	b := invoice.NewJobRunner(e.inv, nil)
	if ok, err := b.RunOnce(ctx); ok || err != nil {
		t.Fatalf("job taken over under a live lease: %v %v", ok, err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE billing_close_jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.RunOnce(ctx); !ok || err != nil {
		t.Fatalf("runner B: %v %v", ok, err)
	}
	done, err := e.inv.GetJob(ctx, job.ID)
	if err != nil || done.Status != "done" || done.Closed != 30 || done.Skipped != 1 || done.Failed != 0 || done.FinishedAt == nil {
		t.Fatalf("job %+v %v", done, err)
	}
	for _, tn := range tenants {
		var count int
		var total int64
		if err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(total_cents), 0) FROM billing_invoices WHERE tenant_id = $1 AND period = $2`,
			tn, march).Scan(&count, &total); err != nil {
			t.Fatal(err)
		}
		if count != 1 || total != 400 {
			t.Fatalf("tenant %s: %d invoices totalling %d, want one of 400", tn, count, total)
		}
	}
	var usageOnlyInvoices, aprilOnlyInvoices int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = $1 AND total_cents = 0),
		count(*) FILTER (WHERE tenant_id = $2) FROM billing_invoices WHERE period = $3`, usageOnly, aprilOnly, march).
		Scan(&usageOnlyInvoices, &aprilOnlyInvoices); err != nil {
		t.Fatal(err)
	}
	if usageOnlyInvoices != 1 || aprilOnlyInvoices != 0 {
		t.Fatalf("usage-only tenant: %d invoices; April-only tenant: %d March invoices", usageOnlyInvoices, aprilOnlyInvoices)
	}
	if _, err := e.inv.GetJob(ctx, uuid.New()); !errors.Is(err, invoice.ErrJobNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

package sdk_test

import (
	"testing"
	"time"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// Finance grants credit, closes March for every tenant in one call and follows the job to its
// end; each tenant's invoice draws its own credit; a tenant reads only its own balance.
func TestCloseAllAndCredits(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	m := e.Meter(t, "gs-close-all")
	fin, a, b := e.Client(t, e.Finance), e.Client(t, e.A.AdminKey), e.Client(t, e.B.AdminKey)
	if _, err := fin.AddPrice(ctx, sdk.AddPriceRequest{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: micros(2_000_000), EffectiveFrom: march}); err != nil {
		t.Fatal(err)
	}
	m.GPU(t, e.A.ID, "H100", "dedicated", march.Add(time.Hour), time.Hour)   // 2.00
	m.GPU(t, e.B.ID, "H100", "dedicated", march.Add(time.Hour), 3*time.Hour) // 6.00
	if _, err := fin.AddCredit(ctx, sdk.AddCreditRequest{TenantID: e.A.ID, AmountCents: 150}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddCredit(ctx, sdk.AddCreditRequest{TenantID: e.A.ID, AmountCents: 150}); !sdk.IsForbidden(err) {
		t.Fatalf("a tenant granted itself credit: %v", err)
	}
	job, err := fin.CloseAllPeriods(ctx, "2026-03")
	if err != nil {
		t.Fatal(err)
	}
	for job.Status == "running" {
		time.Sleep(100 * time.Millisecond)
		if job, err = fin.GetCloseJob(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
	}
	if job.Status != "done" || job.Closed != 2 || job.Failed != 0 {
		t.Fatalf("job %+v", job)
	}
	invA, err := sdk.Collect(a.Invoices(ctx, ""))
	if err != nil || len(invA) != 1 || invA[0].TotalCents != 200 || invA[0].CreditCents != 150 || invA[0].AmountDueCents != 50 {
		t.Fatalf("A's invoices %+v %v", invA, err)
	}
	balA, err := a.GetBalance(ctx, "")
	if err != nil || balA.Balance.CreditCents != 0 {
		t.Fatalf("A's balance after its credit paid March: %+v %v", balA, err)
	}
	if _, err := b.GetBalance(ctx, e.A.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B reads A's balance: %v", err)
	}
	if _, err := fin.CloseAllPeriods(ctx, "2099-01"); !sdk.IsConflict(err) {
		t.Fatalf("closing the future: %v", err)
	}
}

package credit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/credit"
	"gpucloud/billing/rating"
	"gpucloud/billing/webhook"
	"gpucloud/internal/pgtest"
)

// A tenant on prepaid credit whose budget says stop_instances is warned (credit.low, not yet
// exhausted) while credit is left, and only once its credit is used up are its instances stopped,
// with a second credit.low saying so; a tenant whose budget only blocks creates is warned alike
// but never stopped. Both warnings reach a real receiver, signed.
func TestHardStopWarnsThenStopsInstances(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	if _, err := rating.NewBook(pool).Add(ctx, rating.Price{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: 4_000_000, EffectiveFrom: march.AddDate(0, -1, 0)}); err != nil {
		t.Fatal(err)
	}
	stopping, blocking := uuid.New(), uuid.New()
	svc := credit.New(pool)
	recv := billingtest.NewReceiver(t)
	hooks := webhook.NewStore(pool)
	for _, c := range []struct {
		tenant uuid.UUID
		stop   string
	}{{stopping, credit.StopInstances}, {blocking, credit.StopCreate}} {
		held := billingtest.Dedicated(c.tenant, 1, march, 0)
		held.End = time.Time{} // still held: 4.00 an hour
		billingtest.Hold(t, pool, held)
		if _, err := svc.AddGrant(ctx, credit.Grant{TenantID: c.tenant, AmountCents: 1000}, march); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.SetBudget(ctx, credit.Budget{TenantID: c.tenant, LimitCents: 1_000_000, HardStop: c.stop}); err != nil {
			t.Fatal(err)
		}
	}
	ep, err := hooks.Create(ctx, &stopping, recv.URL+"/hook", []string{webhook.CreditLow})
	if err != nil {
		t.Fatal(err)
	}
	recv.SetSecret(ep.Secret)

	var mu sync.Mutex
	stopped := map[uuid.UUID]int{}
	ev := credit.NewEvaluator(svc, nil)
	ev.Stop = func(_ context.Context, tenant uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		stopped[tenant]++
		return nil
	}
	check := func(at time.Time) map[uuid.UUID]int {
		t.Helper()
		if err := ev.Check(ctx, at); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		out := map[uuid.UUID]int{}
		for k, v := range stopped {
			out[k] = v
		}
		return out
	}

	if s := check(march.Add(time.Hour)); len(s) != 0 { // 6.00 of 10.00 left
		t.Fatalf("stopped with 60%% of credit left: %v", s)
	}
	billingtest.DeliverAll(t, pool)
	if r := recv.Got(); len(r) != 0 {
		t.Fatalf("webhooks with 60%% of credit left: %+v", r)
	}
	if s := check(march.Add(135 * time.Minute)); len(s) != 0 { // 1.00 left: 10%, under 20%
		t.Fatalf("stopped with credit left: %v", s)
	}
	check(march.Add(140 * time.Minute)) // no second warning
	billingtest.DeliverAll(t, pool)
	warn := recv.Got()
	if len(warn) != 1 || warn[0].Event != webhook.CreditLow || warn[0].Data["exhausted"] != false ||
		warn[0].Data["hard_stop"] != credit.StopInstances || warn[0].SigErr != nil {
		t.Fatalf("warning: %+v, want one signed credit.low, not exhausted, naming stop_instances", warn)
	}

	s := check(march.Add(3 * time.Hour)) // 12.00 held against 10.00: exhausted
	if s[stopping] != 1 || s[blocking] != 0 {
		t.Fatalf("stops %v: want the stop_instances tenant stopped once, the block_create tenant never", s)
	}
	billingtest.DeliverAll(t, pool)
	all := recv.Got()
	if len(all) != 2 || all[1].Event != webhook.CreditLow || all[1].Data["exhausted"] != true || all[1].SigErr != nil {
		t.Fatalf("deliveries %+v: want the warning, then one signed credit.low saying exhausted", all)
	}
	// Still exhausted at the next check: stopped again (a restarted instance), warned no more.
	if s := check(march.Add(4 * time.Hour)); s[stopping] != 2 {
		t.Fatalf("stops %v after a second check while exhausted", s)
	}
	billingtest.DeliverAll(t, pool)
	if n := len(recv.Got()); n != 2 {
		t.Fatalf("%d deliveries after a second exhausted check, want still 2", n)
	}
}

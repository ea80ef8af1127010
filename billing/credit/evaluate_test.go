package credit_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
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

// One check evaluates every tenant at once; for each tenant it must agree with that tenant's own
// Balance (month to date and balance over several unbilled months, a closed month skipped, prices
// changing mid-month, GPUs, VMs and storage) and fire each budget threshold and credit warning it
// crossed exactly once, however often and however concurrently it runs.
func TestCheckAgreesWithEachTenantsBalance(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	book := rating.NewBook(pool)
	for _, p := range []rating.Price{
		{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 4_000_000, EffectiveFrom: march.AddDate(0, -1, 0)},
		{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: 4_500_000, EffectiveFrom: march.Add(5*24*time.Hour + 3*time.Hour)},
		{Kind: "vm", InstanceType: "g1.large", UnitPriceMicros: 510_000, EffectiveFrom: march.AddDate(0, -1, 0)},
		{Kind: "storage", UnitPriceMicros: 1_300, EffectiveFrom: march.AddDate(0, -1, 0)},
	} {
		if _, err := book.Add(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	svc := credit.New(pool)
	rng := rand.New(rand.NewPCG(17, 4))
	type tenantCase struct {
		id      uuid.UUID
		limit   int64 // 0: no budget
		granted int64
	}
	var tenants []tenantCase
	for i := range 40 {
		tc := tenantCase{id: uuid.New()}
		// From January (unpriced), February or somewhere in March; some already stopped.
		start := march.AddDate(0, -2+rng.IntN(3), rng.IntN(9)).Add(time.Duration(rng.IntN(86400)) * time.Second)
		end := time.Time{}
		if i%4 == 0 {
			end = start.Add(time.Duration(1+rng.IntN(400)) * time.Hour)
		}
		inst := uuid.New()
		for _, a := range []billingtest.Alloc{
			{Kind: "gpu", Tier: "dedicated", GPUModel: "H100", InstType: "g1.large", Quantity: int64(1 + rng.IntN(3))},
			{Kind: "vm", Tier: "dedicated", GPUModel: "H100", InstType: "g1.large", Quantity: 1},
			{Kind: "storage", Tier: "dedicated", GPUModel: "H100", InstType: "g1.large", Quantity: int64(1+rng.IntN(200)) << 10},
		} {
			a.Tenant, a.Instance, a.Start, a.End = tc.id, inst, start, end
			billingtest.Hold(t, pool, a)
		}
		if i%5 == 1 { // February already invoiced: unbilled starts in March
			if _, err := pool.Exec(ctx, `INSERT INTO billing_invoices (tenant_id, period, status) VALUES ($1, $2, 'draft')`, tc.id, march.AddDate(0, -1, 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `UPDATE billing_invoices SET status = 'closed', closed_at = now() WHERE tenant_id = $1`, tc.id); err != nil {
				t.Fatal(err)
			}
		}
		if i%3 != 2 {
			tc.limit = int64(20_000 + rng.IntN(300_000))
			if _, err := svc.SetBudget(ctx, credit.Budget{TenantID: tc.id, LimitCents: tc.limit}); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			for range 1 + rng.IntN(2) {
				g := int64(10_000 + rng.IntN(400_000))
				if _, err := svc.AddGrant(ctx, credit.Grant{TenantID: tc.id, AmountCents: g}, march); err != nil {
					t.Fatal(err)
				}
				tc.granted += g
			}
		}
		tenants = append(tenants, tc)
	}
	if _, err := webhook.NewStore(pool).Create(ctx, nil, "http://127.0.0.1:1/finance", []string{webhook.BudgetThreshold, webhook.CreditLow}); err != nil {
		t.Fatal(err)
	}

	now := march.Add(10*24*time.Hour + 7*time.Hour + 13*time.Minute + 5*time.Second + 500*time.Millisecond)
	ev := credit.NewEvaluator(svc, nil)
	var wg sync.WaitGroup
	for range 3 { // replicas at once, then once more
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ev.Check(ctx, now); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := ev.Check(ctx, now); err != nil {
		t.Fatal(err)
	}

	fired := map[string]int{} // "tenant type threshold|kind" -> webhooks queued
	rows, err := pool.Query(ctx, `SELECT tenant_id, event_type, payload FROM billing_webhook_deliveries`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tenant uuid.UUID
		var typ string
		var payload []byte
		if err := rows.Scan(&tenant, &typ, &payload); err != nil {
			t.Fatal(err)
		}
		var env struct {
			ID       uuid.UUID      `json:"id"`
			Type     string         `json:"type"`
			TenantID uuid.UUID      `json:"tenant_id"`
			At       time.Time      `json:"at"`
			Data     map[string]any `json:"data"`
		}
		if err := json.Unmarshal(payload, &env); err != nil {
			t.Fatal(err)
		}
		if env.Type != typ || env.TenantID != tenant || env.ID == uuid.Nil || !env.At.Equal(now.Truncate(time.Second)) {
			t.Fatalf("envelope %+v for %s %s", env, tenant, typ)
		}
		key := tenant.String() + " " + typ + " "
		if typ == webhook.BudgetThreshold {
			key += thresholdKey(env.Data["threshold_percent"])
		} else {
			key += map[bool]string{true: "exhausted", false: "low"}[env.Data["exhausted"] == true]
		}
		fired[key]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var crossings, warnings int
	for _, tc := range tenants {
		bal, err := svc.Balance(ctx, tc.id, now)
		if err != nil {
			t.Fatal(err)
		}
		if bal.CreditCents > tc.granted {
			t.Fatalf("credit %d over granted %d", bal.CreditCents, tc.granted)
		}
		for _, th := range []int{50, 80, 100} {
			want := tc.limit > 0 && bal.MonthToDateCents*100 >= tc.limit*int64(th)
			key := tc.id.String() + " " + webhook.BudgetThreshold + " " + thresholdKey(float64(th))
			if got := fired[key]; (want && got != 1) || (!want && got != 0) {
				t.Errorf("tenant %s: %d%% of %d with %d spent: %d webhooks", tc.id, th, tc.limit, bal.MonthToDateCents, got)
			}
			if want {
				crossings++
				var spent int64
				if err := pool.QueryRow(ctx, `SELECT spent_cents FROM billing_budget_alerts WHERE tenant_id = $1 AND threshold = $2`,
					tc.id, th).Scan(&spent); err != nil || spent != bal.MonthToDateCents {
					t.Errorf("tenant %s: alert says %d spent, Balance %d (%v)", tc.id, spent, bal.MonthToDateCents, err)
				}
			}
		}
		for kind, want := range map[string]bool{
			"low":       tc.granted > 0 && bal.BalanceCents*100 < tc.granted*credit.LowCreditPercent,
			"exhausted": tc.granted > 0 && bal.BalanceCents <= 0,
		} {
			if got := fired[tc.id.String()+" "+webhook.CreditLow+" "+kind]; (want && got != 1) || (!want && got != 0) {
				t.Errorf("tenant %s: credit %s (balance %d of %d granted): %d webhooks", tc.id, kind, bal.BalanceCents, tc.granted, got)
			}
			if want {
				warnings++
			}
		}
	}
	// The data must exercise both sides of every condition.
	if crossings < 10 || warnings < 3 || crossings == 3*len(tenants) {
		t.Fatalf("%d threshold crossings and %d credit warnings: the cases do not cover enough", crossings, warnings)
	}
}

// thresholdKey writes a JSON number (float64 once decoded) as an integer.
func thresholdKey(v any) string {
	f, _ := v.(float64)
	return strconv.Itoa(int(f))
}

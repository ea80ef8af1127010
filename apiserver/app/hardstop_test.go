package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"gpucloud/apiserver/store"
	"gpucloud/billing/credit"
	"gpucloud/billing/rating"
)

// A tenant whose budget hard-stops creates, with its prepaid credit used up by what it held, is
// refused a new instance (402, credit-exhausted) before anything is placed; another tenant is not.
func TestHardStopRefusesCreates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, base, _ := serveForTest(ctx, t)
	broke, _, brokeKey, err := TenantWithAdmin(ctx, st, store.Tenant{Name: "broke", QuotaInstances: 5}, "admin@broke.example")
	if err != nil {
		t.Fatal(err)
	}
	_, _, richKey, err := TenantWithAdmin(ctx, st, store.Tenant{Name: "rich", QuotaInstances: 5}, "admin@rich.example")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := rating.NewBook(st.Pool).Add(ctx, rating.Price{Kind: "vm", InstanceType: "t", UnitPriceMicros: 1_000_000,
		EffectiveFrom: now.Truncate(time.Hour).Add(-24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// 2 VM-hours at 1.00 held against 1.00 of credit.
	if _, err := st.Pool.Exec(ctx, `INSERT INTO billing_allocations (tenant_id, instance_id, kind, resource_id, instance_type, quantity, started_at, ended_at)
		VALUES ($1, gen_random_uuid(), 'vm', 'x', 't', 1, $2, $3)`, broke.ID, now.Add(-3*time.Hour).Truncate(time.Second), now.Add(-time.Hour).Truncate(time.Second)); err != nil {
		t.Fatal(err)
	}
	cs := credit.New(st.Pool)
	if _, err := cs.AddGrant(ctx, credit.Grant{TenantID: broke.ID, AmountCents: 100}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.SetBudget(ctx, credit.Budget{TenantID: broke.ID, LimitCents: 1000, HardStop: credit.StopCreate}); err != nil {
		t.Fatal(err)
	}
	create := func(apiKey string) (int, string) {
		body, _ := json.Marshal(map[string]string{"name": "vm", "instance_type_id": "00000000-0000-4000-8000-000000000001", "image": "x"})
		var resp *http.Response
		for i := 0; i < 50; i++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/instances", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			if resp, err = http.DefaultClient.Do(req); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct{ Type string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Type
	}
	if code, typ := create(brokeKey); code != http.StatusPaymentRequired || typ != "credit-exhausted" {
		t.Fatalf("exhausted tenant's create: %d %s, want 402 credit-exhausted", code, typ)
	}
	// The other tenant goes on to placement (its instance type does not exist: 404, not 402).
	if code, typ := create(richKey); code == http.StatusPaymentRequired {
		t.Fatalf("a tenant with no budget was hard-stopped: %d %s", code, typ)
	}
}

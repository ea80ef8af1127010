package credit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/credit"
	"gpucloud/billing/rating"
	"gpucloud/billing/webhook"
	"gpucloud/internal/pgtest"
)

// received is one webhook request as a receiver saw it.
type received struct {
	event  string
	data   map[string]any
	sigErr error
}

// receiver is a real HTTP endpoint that records what it is sent, checking each signature.
func receiver(t *testing.T, secret *string) (*httptest.Server, func() []received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		mu.Lock()
		got = append(got, received{event: env.Type, data: env.Data,
			sigErr: webhook.Verify(*secret, r.Header.Get(webhook.SignatureHeader), body, time.Now(), 5*time.Minute)})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), got...)
	}
}

// deliverAll runs the dispatcher until nothing is due.
func deliverAll(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	d := webhook.NewDispatcher(pool, nil, webhook.Options{AllowPrivate: true, Timeout: 5 * time.Second})
	for range 20 {
		n, err := d.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("deliveries still due after 20 rounds")
}

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
	var secret string
	srv, got := receiver(t, &secret)
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
	ep, err := hooks.Create(ctx, &stopping, srv.URL+"/hook", []string{webhook.CreditLow})
	if err != nil {
		t.Fatal(err)
	}
	secret = ep.Secret

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
	deliverAll(t, pool)
	if r := got(); len(r) != 0 {
		t.Fatalf("webhooks with 60%% of credit left: %+v", r)
	}
	if s := check(march.Add(135 * time.Minute)); len(s) != 0 { // 1.00 left: 10%, under 20%
		t.Fatalf("stopped with credit left: %v", s)
	}
	check(march.Add(140 * time.Minute)) // no second warning
	deliverAll(t, pool)
	warn := got()
	if len(warn) != 1 || warn[0].event != webhook.CreditLow || warn[0].data["exhausted"] != false ||
		warn[0].data["hard_stop"] != credit.StopInstances || warn[0].sigErr != nil {
		t.Fatalf("warning: %+v, want one signed credit.low, not exhausted, naming stop_instances", warn)
	}

	s := check(march.Add(3 * time.Hour)) // 12.00 held against 10.00: exhausted
	if s[stopping] != 1 || s[blocking] != 0 {
		t.Fatalf("stops %v: want the stop_instances tenant stopped once, the block_create tenant never", s)
	}
	deliverAll(t, pool)
	all := got()
	if len(all) != 2 || all[1].event != webhook.CreditLow || all[1].data["exhausted"] != true || all[1].sigErr != nil {
		t.Fatalf("deliveries %+v: want the warning, then one signed credit.low saying exhausted", all)
	}
	// Still exhausted at the next check: stopped again (a restarted instance), warned no more.
	if s := check(march.Add(4 * time.Hour)); s[stopping] != 2 {
		t.Fatalf("stops %v after a second check while exhausted", s)
	}
	deliverAll(t, pool)
	if n := len(got()); n != 2 {
		t.Fatalf("%d deliveries after a second exhausted check, want still 2", n)
	}
}

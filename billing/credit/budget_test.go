package credit_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var march = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// A budget crossing fires exactly one webhook per threshold, however often and however
// concurrently budgets are checked, delivered with a valid signature to a receiver that was down
// (connection refused) for the first attempts; another tenant's endpoint gets none of it.
func TestBudgetThresholdsFireOnceAndDeliverAfterOutage(t *testing.T) {
	ctx := context.Background()
	pool := billingtest.Pool(t, pgtest.NewDatabase(t))
	if _, err := rating.NewBook(pool).Add(ctx, rating.Price{Kind: "gpu", GPUModel: "H100", Tier: "dedicated",
		UnitPriceMicros: 4_000_000, EffectiveFrom: march.AddDate(0, -1, 0)}); err != nil {
		t.Fatal(err)
	}
	tenant, other := uuid.New(), uuid.New()
	open := billingtest.Dedicated(tenant, 1, march, 0)
	open.End = time.Time{} // still held
	billingtest.Hold(t, pool, open)
	svc := credit.New(pool)
	if _, err := svc.SetBudget(ctx, credit.Budget{TenantID: tenant, LimitCents: 1000}); err != nil { // 2.5 GPU-hours
		t.Fatal(err)
	}

	// The receiver's address, down (nothing listens) until brought up below.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hooks := webhook.NewStore(pool)
	ep, err := hooks.Create(ctx, &tenant, "http://"+addr+"/hook", []string{webhook.BudgetThreshold, webhook.CreditLow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hooks.Create(ctx, &other, "http://"+addr+"/other", []string{webhook.BudgetThreshold}); err != nil {
		t.Fatal(err)
	}

	ev := credit.NewEvaluator(svc, nil)
	check := func(at time.Time) {
		t.Helper()
		var wg sync.WaitGroup
		for range 3 { // replicas checking at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := ev.Check(ctx, at); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	check(march.Add(time.Hour))                 // 4.00 of 10.00: no threshold
	check(march.Add(90 * time.Minute))          // 6.00: 50%
	check(march.Add(100 * time.Minute))         // 6.67: still only 50%
	check(march.Add(3 * time.Hour))             // 12.00: 80% and 100% at once
	check(march.Add(3*time.Hour + time.Minute)) // nothing new

	d := webhook.NewDispatcher(pool, nil, webhook.Options{AllowPrivate: true, Timeout: time.Second})
	d.Backoff, d.MaxBackoff = 10*time.Millisecond, 40*time.Millisecond
	for range 3 { // down: every attempt is refused and rescheduled
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, err := hooks.Deliveries(ctx, &tenant, ep.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 {
		t.Fatalf("%d deliveries queued, want 3 (50, 80, 100%%): %+v", len(log), log)
	}
	for _, x := range log {
		if x.Status != "pending" || x.Attempts < 2 || x.LastError == "" {
			t.Fatalf("while down: %+v", x)
		}
	}

	type got struct {
		path      string
		threshold float64
		sigErr    error
		delivery  string
	}
	var mu sync.Mutex
	var received []got
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		_ = json.Unmarshal(body, &env)
		mu.Lock()
		received = append(received, got{path: r.URL.Path, threshold: env.Data["threshold_percent"].(float64),
			sigErr:   webhook.Verify(ep.Secret, r.Header.Get(webhook.SignatureHeader), body, time.Now(), 5*time.Minute),
			delivery: r.Header.Get(webhook.DeliveryHeader)})
		mu.Unlock()
		if env.Type != webhook.BudgetThreshold || r.Header.Get(webhook.EventHeader) != webhook.BudgetThreshold {
			t.Errorf("event %q header %q", env.Type, r.Header.Get(webhook.EventHeader))
		}
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(received)
		mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := d.RunOnce(ctx); err != nil { // nothing left to send
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[float64]int{}
	for _, r := range received {
		if r.path != "/hook" || r.sigErr != nil {
			t.Errorf("delivery %+v", r)
		}
		seen[r.threshold]++
	}
	if len(received) != 3 || seen[50] != 1 || seen[80] != 1 || seen[100] != 1 {
		t.Fatalf("received %+v, want 50, 80 and 100 once each", received)
	}
	log, _ = hooks.Deliveries(ctx, &tenant, ep.ID, 0, 100)
	for _, x := range log {
		if x.Status != "delivered" || x.LastStatus != 200 || x.DeliveredAt == nil {
			t.Fatalf("after the outage: %+v", x)
		}
	}
	// A tampered body fails verification.
	if webhook.Verify(ep.Secret, webhook.Sign(ep.Secret, time.Now(), []byte(`{"a":1}`)), []byte(`{"a":2}`), time.Now(), time.Minute) == nil {
		t.Fatal("a tampered body verified")
	}
	// Another tenant cannot read this endpoint's log.
	if _, err := hooks.Deliveries(ctx, &other, ep.ID, 0, 10); err != webhook.ErrNotFound {
		t.Fatalf("other tenant reads the log: %v", err)
	}
}
